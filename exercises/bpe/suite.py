"""Hidden suite for `bpe`: byte-level BPE in pure Python (`train_bpe`, and a `Tokenizer` with
`encode` and `decode`), as GPT-2 and CS336's assignment 1 define it.

Answers are plain data, not tensors: `train_bpe` returns (dict[int, bytes], list of pairs of
bytes), `encode` a list of ints, `decode` a str. They cross the wire as themselves and are
compared exactly (`checks.data`, whose message names the first place they differ) against
the grader's own implementation (`reference.py`), run here in the grader's process.

One bug, one place: each text is encoded by a tokenizer of its own (one test encodes text
after text with one tokenizer: the state a Tokenizer keeps between calls); decode is
compared on ASCII text outside its own tests (a character cut across tokens is theirs).
"""

from __future__ import annotations

import copy
from typing import Any

from grader.core.outcomes import CandidateRaised
from grader.exercises.bpe import reference as ref
from grader.suite import checks
from grader.suite import library as lib
from grader.suite.exercise import Exercise, Watch
from grader.suite.handle import call_step
from grader.suite.integrity import require_no_library

TRAIN, TOKENIZER = "train_bpe", "Tokenizer"
# Tokenizer libraries: the kernel cannot import them (only the standard library and torch
# are allowed), and the from-scratch level flags an import of any of them in the source.
LIBRARIES = ("tiktoken", "tokenizers", "sentencepiece", "transformers", "minbpe")

exercise = Exercise(
    id="bpe",
    tags=("tokenization",),
    minutes=75,
    title="Byte-level BPE: training, encoding and decoding, from scratch",
    seed="-",
    levels=[
        "byte round trip",
        "tiny training",
        "pre-tokenization",
        "exact merges",
        "encoding",
        "special tokens",
        "edge cases",
        "from scratch",
    ],
    defines=(TRAIN, TOKENIZER),
    # nothing from torch is the built-in here: the library imports are scanned below
    forbidden=(),
    watch=Watch(what="tokenizer library"),
    packages=(),  # the standard library only (torch is always importable)
)

BYTES = {i: bytes([i]) for i in range(256)}
EOT = "<|endoftext|>"
TEXTS = ["hello world", "", "héllo, 世界 🙂", "naïve café\n\n  tabs\tand_underscores", "🙂🙂x"]

TINY = "aaabdaaabac"  # minbpe's example: 3 merges give [258, 100, 258, 97, 99]
# No ties in its 4 merges; without pre-tokens, unweighted counts, or a plain \s+ instead of
# \s+(?!\S), the merges differ.
PIECES = "sat, the, 7, it's, on  2024, 7 sat  mat  sat  sat"
FIXTURE = f"low lower lowest{EOT}newer wider new{EOT} the low newest widest\n\nlow  low lower"  # 20 merges after the special, with ties
FIXTURE_SIZE = 256 + 1 + 20
# After (a, a) and (" ", aa), three pairs occur twice: (" aa", c), (" ", b), (b, c). The
# greatest by bytes is (b, c); by ids it would be (" aa", c); the smallest (" ", b).
TIES = "aa aa aac aac bc bc"


def tokenizer(kernel, vocab, merges, specials=None):
    """The candidate's Tokenizer, built in the kernel (special_tokens passed only if given)."""
    if specials is None:
        return kernel.new(TOKENIZER, vocab, merges)
    return kernel.new(TOKENIZER, vocab, merges, specials)


def encodes(kernel, build, texts, what):
    """Each text's ids from the candidate, each encoded by a new tokenizer (`build()`, a
    Remote), all the encodes in one round trip."""
    got = kernel.batch([call_step(build(), "encode", t) for t in texts])
    for text, ids in zip(texts, got, strict=True):
        if not isinstance(ids, list):
            raise checks.Interface(f"{what}.encode({text!r}): got {checks.describe(ids)}, "
                                   "want a list of ints")  # fmt: skip
    return got


def same_ids(kernel, texts, vocab, merges, specials, what):
    """Tokenizer(vocab, merges, specials).encode(text) equals the reference's ids for every
    text (a new tokenizer for each)."""
    build = lambda: tokenizer(kernel, vocab, merges, specials)  # noqa: E731
    for text, ids in zip(texts, encodes(kernel, build, texts, what), strict=True):
        checks.data(ids, ref.encode(text, vocab, merges, specials), f"{what}.encode({text!r})")


def same_training(kernel, text, vocab_size, specials, what, *, vocab=True):
    """train_bpe's merges (then its vocab, or only the vocab's size where `vocab` is
    "size") equal the reference's."""
    got = kernel.get(TRAIN)(text, vocab_size, specials)
    got_vocab, got_merges = checks.pair(got, what, ("vocab", "merges"))
    want_vocab, want_merges = ref.train(text, vocab_size, specials)
    checks.data(got_merges, want_merges, f"{what} merges")
    if vocab == "size":
        if not isinstance(got_vocab, dict):
            raise checks.Interface(f"{what} vocab: got {checks.describe(got_vocab)}, want a dict")
        checks.data(len(got_vocab), len(want_vocab), f"{what}: the vocab's size")
    elif vocab:
        checks.data(got_vocab, want_vocab, f"{what} vocab")


# ---------------------------------------------------------------- byte round trip


@exercise.check("byte round trip", hidden=False)
def returns_vocab_and_merges(kernel):
    """train_bpe on no text returns the 256 single bytes and no merges."""
    same_training(kernel, "", 256, [], "train_bpe('', 256, [])")


@exercise.check("byte round trip", hidden=False)
def bytes_without_merges(kernel):
    """With no merges, encode gives the UTF-8 bytes as ids (ASCII, accents, CJK, emoji)."""
    build = lambda: tokenizer(kernel, BYTES, [])  # noqa: E731
    for text, ids in zip(TEXTS, encodes(kernel, build, TEXTS, "Tokenizer(bytes, [])"), strict=True):
        checks.data(ids, list(text.encode("utf-8")), f"Tokenizer(bytes, []).encode({text!r})")


@exercise.check("byte round trip")
def decode_joins_bytes(kernel):
    """decode of the UTF-8 bytes gives the text back, multi-byte characters included."""
    tok = tokenizer(kernel, BYTES, [])
    got = kernel.batch([call_step(tok, "decode", list(t.encode("utf-8"))) for t in TEXTS])
    for text, back in zip(TEXTS, got, strict=True):
        checks.data(back, text, f"decode(the UTF-8 bytes of {text!r})")


# ---------------------------------------------------------------- tiny training


@exercise.check("tiny training", points=2, hidden=False)
def tiny_merges(kernel):
    """train_bpe('aaabdaaabac', 259, []) makes aa, aaa, aaab (ids 256, 257, 258)."""
    same_training(kernel, TINY, 259, [], f"train_bpe({TINY!r}, 259, [])")


@exercise.check("tiny training")
def tiny_encode(kernel):
    """With those merges, 'aaabdaaabac' encodes as [258, 100, 258, 97, 99], and back."""
    vocab, merges = ref.train(TINY, 259, [])
    texts = [TINY, "baaac", "daaab aaab"]
    same_ids(kernel, texts, vocab, merges, None, "Tokenizer(tiny)")
    ids = ref.encode(TINY, vocab, merges)
    checks.data(
        tokenizer(kernel, vocab, merges).decode(ids), TINY, f"Tokenizer(tiny).decode({ids})"
    )


# ---------------------------------------------------------------- pre-tokenization


@exercise.check("pre-tokenization", points=2)
def merges_stay_inside_pretokens(kernel):
    """Pairs are counted inside pre-tokens only, weighted by how often each occurs."""
    same_training(kernel, PIECES, 260, [], f"train_bpe({PIECES!r}, 260, [])", vocab=False)


@exercise.check("pre-tokenization")
def encode_by_pretokens(kernel):
    """encode merges inside each pre-token, never across two."""
    vocab, merges = ref.train(PIECES, 260, [])
    texts = [PIECES, "sat  sat,  7 sat\n\n sat", "it'sat"]
    same_ids(kernel, texts, vocab, merges, None, "Tokenizer(4 merges)")


# ---------------------------------------------------------------- exact merges


@exercise.check("exact merges", points=2)
def fixture_merges(kernel):
    """20 merges on a text with specials and ties, in order."""
    same_training(kernel, FIXTURE, FIXTURE_SIZE, [EOT], "train_bpe(fixture)", vocab=False)


@exercise.check("exact merges")
def fixture_vocab(kernel):
    """The vocab: bytes at 0..255, the special at 256, then one id per merge."""
    got = kernel.get(TRAIN)(FIXTURE, FIXTURE_SIZE, [EOT])
    got_vocab, _ = checks.pair(got, "train_bpe(fixture)", ("vocab", "merges"))
    checks.data(got_vocab, ref.train(FIXTURE, FIXTURE_SIZE, [EOT])[0], "train_bpe(fixture) vocab")


@exercise.check("exact merges")
def ties_go_to_the_greater_pair(kernel):
    """A three-way tie goes to the lexicographically greatest pair of bytes."""
    same_training(kernel, TIES, 259, [], f"train_bpe({TIES!r}, 259, [])", vocab=False)


# ---------------------------------------------------------------- encoding

# Merged tokens whose ids do not follow their ranks; "abc" is a token, but BPE reaches
# a + bc first (rank 0), and (a, bc) is no merge.
RANKED = [(b"b", b"c"), (b"a", b"b"), (b"ab", b"c"), (b"bc", b"d"), (b" ", b"a")]
RANKED_IDS = {b"bc": 300, b"ab": 256, b"abc": 280, b"bcd": 257, b" a": 290}
ENCODE_TEXTS = ["abc abcd abd bcd ab", "cabcab abcabc"]


def ranked_vocab(byte_id=lambda b: b):
    vocab = {byte_id(b): bytes([b]) for b in range(256)}
    vocab.update({i: token for token, i in RANKED_IDS.items()})
    return vocab


@exercise.check("encoding", points=2)
def lowest_rank_first(kernel):
    """encode merges the lowest-ranked pair first (not the longest token, not the lowest id)."""
    vocab = ranked_vocab()
    same_ids(kernel, ENCODE_TEXTS, vocab, RANKED, None, "Tokenizer(ranked)")


@exercise.check("encoding")
def byte_ids_from_the_vocab(kernel):
    """Single bytes take their ids from the vocab (here byte b has id (7b + 3) % 256), in
    encode and in decode (of ASCII text: a character cut across tokens is decode's own)."""
    vocab = ranked_vocab(lambda b: (7 * b + 3) % 256)
    texts = ["abc", "zebra é"]
    same_ids(kernel, texts, vocab, RANKED, None, "Tokenizer(permuted bytes)")
    ids = ref.encode("zebra", vocab, RANKED)
    decoded = tokenizer(kernel, vocab, RANKED).decode(ids)
    checks.data(decoded, "zebra", f"Tokenizer(permuted bytes).decode({ids})")


@exercise.check("encoding")
def one_tokenizer_text_after_text(kernel):
    """One Tokenizer(bytes, merges) encodes four texts one after the other: each gives its
    own ids, nothing kept from the texts before."""
    vocab = ranked_vocab()
    tok = tokenizer(kernel, vocab, RANKED)
    texts = ["abc", "bcd ab", "", "cab"]
    got = kernel.batch([call_step(tok, "encode", t) for t in texts])
    for number, (text, ids) in enumerate(zip(texts, got, strict=True), start=1):
        want = ref.encode(text, vocab, RANKED)
        checks.data(ids, want, f"Tokenizer(ranked): encode number {number}, of {text!r}")


# ---------------------------------------------------------------- special tokens


@exercise.check("special tokens", hidden=False)
def specials_are_one_id(kernel):
    """A special token is one id, never split or merged; decode gives it back."""
    vocab, merges = ref.train(FIXTURE, FIXTURE_SIZE, [EOT])
    texts = [f"low{EOT}lowest", f"{EOT}{EOT} newer{EOT}", f"the<|end{EOT}oftext|>"]
    same_ids(kernel, texts, vocab, merges, [EOT], "Tokenizer(fixture, [EOT])")
    ids = ref.encode(texts[1], vocab, merges, [EOT])
    decoded = tokenizer(kernel, vocab, merges, [EOT]).decode(ids)
    checks.data(decoded, texts[1], f"Tokenizer(fixture, [EOT]).decode({ids})")


@exercise.check("special tokens")
def longest_special_first(kernel):
    """Overlapping specials: the longest one that matches wins."""
    specials = ["<|eot|>", "<|eot|><|eot|>"]
    vocab, merges = ref.train("eot eot <|x|> end", 262, specials)
    texts = ["a<|eot|><|eot|>b<|eot|>", "<|eot|><|eot|><|eot|>"]
    same_ids(kernel, texts, vocab, merges, specials, "Tokenizer(overlapping specials)")


# ---------------------------------------------------------------- edge cases


@exercise.check("edge cases")
def invalid_utf8_is_replaced(kernel):
    """decode turns invalid or cut UTF-8 into U+FFFD, as errors='replace' does."""
    tok = tokenizer(kernel, BYTES, [])
    cases = [[0xE4, 0xB8], [0x61, 0xFF, 0x62], [0xF0, 0x9F, 0x99, 0x82, 0x80]]
    got = kernel.batch([call_step(tok, "decode", ids) for ids in cases])
    for ids, back in zip(cases, got, strict=True):
        checks.data(back, ref.decode(ids, BYTES), f"decode({ids})")


@exercise.check("edge cases")
def training_runs_out_of_pairs(kernel):
    """Training stops early when no pair is left, and makes no merge below 256 + specials
    (the merges, and the vocab's size)."""
    same_training(kernel, "ab", 300, [], "train_bpe('ab', 300, [])", vocab="size")
    same_training(kernel, f"ab{EOT}ab", 200, [EOT], "train_bpe('ab<|endoftext|>ab', 200, [EOT])",
                  vocab="size")  # fmt: skip


@exercise.check("edge cases")
def no_specials_means_plain_text(kernel):
    """Without special tokens (None, or an empty list), '<|endoftext|>' is ordinary text."""
    vocab, merges = ref.train(FIXTURE, FIXTURE_SIZE, [EOT])
    same_ids(kernel, [f"low{EOT}new"], vocab, merges, None, "Tokenizer(fixture)")
    same_ids(kernel, [f"low{EOT}new"], vocab, merges, [], "Tokenizer(fixture, [])")


@exercise.check("edge cases")
def arguments_are_left_unchanged(kernel):
    """train_bpe leaves its special_tokens list as it was, and Tokenizer (with and without
    specials) leaves vocab, merges and special_tokens as they were, encode included."""
    specials = ["<|eot|>", "<|eot|><|eot|>", "<|x|>"]
    vocab, merges = ref.train("eot eot <|x|> end", 263, specials)
    text = "a<|eot|><|eot|>b<|x|> end"
    runs: list[tuple[str, list[tuple[str, Any]]]] = [
        (TRAIN, [("special_tokens", specials)]),
        (TOKENIZER, [("vocab", vocab), ("merges", merges)]),
        (TOKENIZER, [("vocab", vocab), ("merges", merges), ("special_tokens", specials)]),
    ]
    for function, arguments in runs:
        held = {name: kernel.hold(copy.deepcopy(value), name) for name, value in arguments}
        try:
            if function == TRAIN:
                kernel.get(TRAIN)(text, 263, held["special_tokens"])
            else:
                kernel.new(TOKENIZER, *held.values()).encode(text)
        except CandidateRaised as error:  # a wrong answer is another test's: the arguments are ours
            if error.not_implemented or error.interface:
                raise
        shown = f"{function}({', '.join(held)})" + (
            ".encode(text)" if function == TOKENIZER else ""
        )
        for name, value in arguments:
            after = kernel.call(held[name].target, "copy", (), {}, f"{name}.copy()")
            checks.data(after, value, f"{name} after {shown}")


# ---------------------------------------------------------------- from scratch


@exercise.check("from scratch")
def no_tokenizer_library(kernel):
    """The notebook imports no tokenizer library, and no watched machinery ran."""
    vocab, merges = ref.train(TINY, 259, [])
    lib.no_builtin(kernel, exercise, lambda: tokenizer(kernel, vocab, merges).encode(TINY))
    require_no_library(kernel.sources, LIBRARIES, "a tokenizer library")
