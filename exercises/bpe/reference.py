"""The grader's own byte-level BPE: the pinned reference the hidden suite compares against.

Pure Python, run in the grader's process. Written apart from the solution notebook: training
re-counts every pair from the pre-token counts after each merge, and encoding applies the
merges in rank order, each to the whole piece (equivalent to GPT-2's "lowest-ranked pair
first" loop for a list of merges that a training run produced).
"""

from __future__ import annotations

import re
from collections import Counter

# GPT-2's pre-tokenizer with \p{L} -> [^\W\d_] and \p{N} -> \d (stdlib `re`), and `_` kept
# in the punctuation class (GPT-2's [^\s\p{L}\p{N}] holds it). The notebook states it.
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
PIECES = re.compile(PATTERN)

Word = tuple[bytes, ...]


def split_specials(text: str, specials: list[str]) -> list[tuple[str, bool]]:
    """`text` as (part, is_special) in order, the specials matched longest first."""
    if not specials:
        return [(text, False)]
    ordered = sorted(specials, key=len, reverse=True)
    alternation = "|".join(re.escape(s) for s in ordered)
    parts = re.split(f"({alternation})", text)
    return [(p, i % 2 == 1) for i, p in enumerate(parts) if p or i % 2 == 1]


def pieces(text: str) -> list[str]:
    return PIECES.findall(text)


def merge_word(word: Word, pair: tuple[bytes, bytes]) -> Word:
    out: list[bytes] = []
    i = 0
    while i < len(word):
        if word[i : i + 2] == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train(
    text: str, vocab_size: int, specials: list[str]
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """Bytes 0..255 first, then the specials in order, then one token per merge."""
    vocab = {i: bytes([i]) for i in range(256)}
    for s in specials:
        vocab[len(vocab)] = s.encode("utf-8")
    words: Counter[Word] = Counter()
    for part, special in split_specials(text, specials):
        if not special:
            for piece in pieces(part):
                words[tuple(bytes([b]) for b in piece.encode("utf-8"))] += 1
    merges: list[tuple[bytes, bytes]] = []
    while len(vocab) < vocab_size:
        counts: Counter[tuple[bytes, bytes]] = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:], strict=False):
                counts[pair] += n
        if not counts:
            break
        best = max(counts.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        vocab[len(vocab)] = best[0] + best[1]
        words = Counter({merge_word(w, best): n for w, n in words.items()})
    return vocab, merges


def encode(
    text: str,
    vocab: dict[int, bytes],
    merges: list[tuple[bytes, bytes]],
    specials: list[str] | None = None,
) -> list[int]:
    ids = {token: i for i, token in vocab.items()}
    out: list[int] = []
    for part, special in split_specials(text, specials or []):
        if special:
            out.append(ids[part.encode("utf-8")])
            continue
        for piece in pieces(part):
            word: Word = tuple(bytes([b]) for b in piece.encode("utf-8"))
            for pair in merges:
                if len(word) < 2:
                    break
                word = merge_word(word, pair)
            out.extend(ids[token] for token in word)
    return out


def decode(ids: list[int], vocab: dict[int, bytes]) -> str:
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
