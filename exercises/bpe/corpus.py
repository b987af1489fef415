"""The corpus of bpe.

Single-bug copies of the solution (each must first lose points on its level, and the card
asks its hint when a notebook fails the same way) and correct variants (each must keep full
marks).

Mutant(name, old, new, level, hint=...): `old` is found exactly once in the solution's code
and replaced by `new`.
"""

from grader.suite.corpus import Mutant, Variant

MIN_MUTANTS = 15

DECODE = 'return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")'
TIE = "best = max(stats, key=lambda p: (stats[p], vocab[p[0]], vocab[p[1]]))"
VOCAB_START = """    vocab = {i: bytes([i]) for i in range(256)}
    for special in special_tokens:
        vocab[len(vocab)] = special.encode("utf-8")
"""
ORDERED = "ordered = sorted(special_tokens, key=len, reverse=True)"
ENCODE_PIECE = """        word = [self.ids[bytes([b])] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            word = merge(word, best, self.merged[best])
        return word
"""

MUTANTS = [
    # byte round trip
    Mutant(
        "decode_per_token_utf8",
        DECODE,
        'return "".join(self.vocab[i].decode("utf-8", errors="replace") for i in ids)',
        "byte round trip",
        hint="each token decoded to text on its own, splitting multi-byte characters "
        "(U+FFFD), instead of joining the bytes and decoding once?",
    ),
    # tiny training
    Mutant(
        "merge_overlapping_pairs",
        "            out.append(new_id)\n            i += 2",
        "            out.append(new_id)\n            i += 1",
        "tiny training",
        hint="after a merge the scan moves one token, not two, so 'aaa' merges as two "
        "overlapping pairs?",
        values=True,  # every merge, in training and in encode
    ),
    Mutant(
        "merge_first_occurrence_only",
        "            out.append(new_id)\n            i += 2",
        "            out.extend([new_id, *word[i + 2 :]])\n            break",
        "tiny training",
        hint="only the first occurrence of the pair merged, not every one?",
    ),
    Mutant(
        "no_specials_cuts_every_character",
        "    if not special_tokens:\n        return [text] if text else []\n",
        "",
        "tiny training",
        hint="with no special tokens, the split pattern is empty and cuts the text at every "
        "character?",
        values=True,  # the default path: every text without specials
    ),
    # pre-tokenization
    Mutant(
        "no_pretokenization",
        "return re.findall(PATTERN, text)",
        "return [text] if text else []",
        "pre-tokenization",
        hint="no pre-tokenization: pairs counted and merged across spaces and punctuation?",
    ),
    Mutant(
        "counts_not_weighted",
        "counts.update(pretokenize(part))",
        "counts.update(set(pretokenize(part)) - set(counts))",
        "pre-tokenization",
        hint="each distinct pre-token counted once, not as often as it occurs?",
    ),
    Mutant(
        "pattern_without_lookahead",
        r"|\s+(?!\S)|\s+",
        r"|\s+",
        "pre-tokenization",
        hint=r"the pattern's \s+(?!\S) dropped, so a run of spaces keeps its last space "
        "instead of leaving it to the next word?",
    ),
    Mutant(
        "encode_across_pretokens",
        "for piece in pretokenize(part):",
        "for piece in [part]:",
        "pre-tokenization",
        hint="encode merges the whole text (between specials) at once, across pre-tokens?",
    ),
    # exact merges
    Mutant(
        "tie_first_seen",
        TIE,
        "best = max(stats, key=stats.get)",
        "exact merges",
        hint="a tie between pair counts goes to the first pair seen, not the "
        "lexicographically greater one?",
    ),
    # the tiny example's second merge is a tie, (aa, a) against (a, b)
    Mutant(
        "tie_smaller_pair",
        TIE,
        "best = min(stats, key=lambda p: (-stats[p], vocab[p[0]], vocab[p[1]]))",
        "tiny training",
        hint="a tie goes to the lexicographically smaller pair, not the greater?",
    ),
    Mutant(
        "tie_by_ids",
        TIE,
        "best = max(stats, key=lambda p: (stats[p], p))",
        "exact merges",
        hint="ties broken by comparing token ids instead of the tokens' bytes?",
    ),
    Mutant(
        "special_ids_first",
        VOCAB_START,
        """    vocab = {i: s.encode("utf-8") for i, s in enumerate(special_tokens)}
    for byte in range(256):
        vocab[len(vocab)] = bytes([byte])
""",
        "exact merges",
        hint="special tokens given ids 0, 1, ... before the 256 bytes, not right after them?",
    ),
    Mutant(
        "vocab_size_off_by_specials",
        "while len(vocab) < vocab_size:",
        "while len(merges) < vocab_size - 256:",
        "exact merges",
        hint="vocab_size - 256 merges, forgetting that the special tokens take ids too?",
    ),
    Mutant(
        "specials_counted_in_training",
        "        if part not in specials:\n            counts.update(pretokenize(part))",
        "        counts.update(pretokenize(part))",
        "exact merges",
        hint="the special tokens' text counted in training (pairs learned from '<|endoftext|>')?",
    ),
    # encoding
    Mutant(
        "encode_longest_match",
        ENCODE_PIECE,
        """        data = piece.encode("utf-8")
        word = []
        while data:
            size = max(n for n in range(1, len(data) + 1) if data[:n] in self.ids)
            word.append(self.ids[data[:size]])
            data = data[size:]
        return word
""",
        "encoding",
        hint="encode takes the longest token in the vocab (WordPiece-like) instead of "
        "merging the lowest-ranked pair first?",
    ),
    Mutant(
        "encode_rank_by_id",
        "self.ranks.setdefault(pair, rank)",
        "self.ranks.setdefault(pair, self.ids[a + b])",
        "encoding",
        hint="merges ranked by the merged token's id instead of their order in merges?",
    ),
    Mutant(
        "bytes_as_ids",
        'word = [self.ids[bytes([b])] for b in piece.encode("utf-8")]',
        'word = list(piece.encode("utf-8"))',
        "encoding",
        hint="byte b taken as id b instead of looking its id up in the vocab?",
    ),
    Mutant(
        "encode_reuses_its_output_list",
        "        specials = set(self.special_tokens)\n        ids = []\n",
        "        specials = set(self.special_tokens)\n"
        '        ids = self.__dict__.setdefault("_ids", [])  # one list for every call\n',
        "encoding",
        hint="encode appends to a list kept on the tokenizer, so each call returns the ids "
        "of every text so far?",
    ),
    # special tokens
    Mutant(
        "specials_through_bpe",
        "            if part in specials:\n                ids.append",
        "            if False:\n                ids.append",
        "special tokens",
        hint="special tokens encoded as ordinary text, not as their one id?",
    ),
    Mutant(
        "specials_shortest_first",
        ORDERED,
        "ordered = sorted(special_tokens, key=len)",
        "special tokens",
        hint="overlapping special tokens matched shortest first instead of longest first?",
    ),
    # edge cases
    Mutant(
        "decode_strict",
        DECODE,
        'return b"".join(self.vocab[i] for i in ids).decode("utf-8")',
        "edge cases",
        hint="decode raises on invalid UTF-8 instead of errors='replace'?",
    ),
    Mutant(
        "decode_ignore",
        DECODE,
        'return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="ignore")',
        "edge cases",
        hint="decode drops invalid UTF-8 (errors='ignore') instead of writing U+FFFD?",
    ),
    Mutant(
        "no_stop_without_pairs",
        "        if not stats:\n            break\n",
        "",
        "edge cases",
        hint="training does not stop when no pair is left (max of nothing)?",
    ),
    Mutant(
        "specials_sorted_in_place",
        ORDERED,
        "special_tokens.sort(key=len, reverse=True)  # the caller's list\n"
        "    ordered = special_tokens",
        "edge cases",
        hint="the caller's special_tokens list sorted in place (list.sort) instead of a "
        "sorted copy?",
    ),
    # from scratch
    Mutant(
        "imports_tiktoken",
        "from collections import Counter\n",
        "from collections import Counter\n\ntry:\n    import tiktoken\n"
        "except ImportError:\n    tiktoken = None\n",
        "from scratch",
        hint="a tokenizer library (tiktoken) imported?",
    ),
]

VARIANTS = [
    # the scaffold filled in by someone who had read only the scaffold (not this solution)
    Variant("independent", notebook="variants/independent.ipynb"),
    # GPT-2's loop in another form: every merge applied in rank order, each to the whole
    # pre-token (equivalent for merges whose parts exist before them)
    Variant(
        "merges_in_rank_order",
        ENCODE_PIECE,
        """        word = [self.ids[bytes([b])] for b in piece.encode("utf-8")]
        for pair, rank in sorted(self.ranks.items(), key=lambda item: item[1]):
            if len(word) < 2:
                break
            word = merge(word, pair, self.merged[pair])
        return word
""",
    ),
    # a helper named like the libraries: no false alarm
    Variant(
        "helper_named_tokenizers",
        DECODE,
        "tokenizers = [self.vocab[i] for i in ids]\n"
        '        return b"".join(tokenizers).decode("utf-8", errors="replace")',
    ),
    # specials matched by a scan instead of a regular expression
    Variant(
        "specials_by_scan",
        """    ordered = sorted(special_tokens, key=len, reverse=True)
    parts = re.split("(" + "|".join(re.escape(s) for s in ordered) + ")", text)
    return [part for part in parts if part]
""",
        """    ordered = sorted(special_tokens, key=len, reverse=True)
    parts, start, i = [], 0, 0
    while i < len(text):
        hit = next((s for s in ordered if text.startswith(s, i)), None)
        if hit is None:
            i += 1
            continue
        parts += [text[start:i], hit]
        i = start = i + len(hit)
    parts.append(text[start:])
    return [part for part in parts if part]
""",
    ),
]
