"""Children's stories for the real-text experiment of seed 001 (Figs. 1, 6).

The seed mixes PrOntoQA with TinyStories (Eldan & Li 2023: short stories in the words a 3-4 year old
understands). TinyStories is not installable from a package index, so:

* :func:`read_stories` reads a TinyStories text file the user names (``--set data.stories=PATH``; the
  released ``TinyStories-*.txt`` files separate stories with the end-of-story marker ``<|endoftext|>``),
  reading only as far as the stories it needs;
* :func:`standin_stories` writes simple stories from templates over a small child-level lexicon,
  deterministic in a seed, for runs with no file. They are *stand-in data*: every claim measured on
  them is labelled so (the experiment does it). Their statistics are not TinyStories' — fewer word
  types, shorter and more regular sentences — which is the approximation the label names.

A missing, unreadable or malformed file is a :class:`ConfigError` naming ``data.stories``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from tdlab.config import ConfigError, echo
from tdlab.progress import ProgressBar
from tdlab.safeio import path_kind
from tdlab.seeding import derive_seed

__all__ = ["END_MARKER", "MAX_STORY_BYTES", "STANDIN_LABEL", "read_stories", "standin_stories"]

END_MARKER = "<|endoftext|>"  # TinyStories' end-of-story marker
STANDIN_LABEL = "stand-in data"  # the label of every claim measured on standin_stories()
_CHUNK = 1 << 20  # bytes read at a time: a 2 GB TinyStories file is read only as far as needed
MAX_STORY_BYTES = 1 << 20  # longest text read for one story (TinyStories' longest are a few KiB)
PROGRESS_BYTES = 64 << 20  # a larger file shows a progress bar while it is read

# ---- the stand-in lexicon (child-level words; TinyStories' register) ----------------------------
_NAMES = ("Lily", "Tom", "Ben", "Mia", "Sam", "Anna", "Max", "Lucy", "Tim", "Sue", "Jack", "Emma", "Leo", "Zoe")
_ANIMALS = ("cat", "dog", "bird", "bunny", "duck", "frog", "fish", "bear", "puppy", "kitten", "mouse", "pig")
_THINGS = ("ball", "kite", "toy car", "red hat", "big box", "flower", "cake", "book", "boat", "doll", "cookie", "shell")
_PLACES = ("park", "garden", "forest", "beach", "house", "farm", "pond", "school", "hill", "yard")
_FEELINGS = ("happy", "sad", "scared", "excited", "tired", "angry", "proud", "surprised")
_ADJ = ("little", "big", "shiny", "soft", "pretty", "funny", "old", "new", "tiny", "bright")
_WEATHER = ("sunny", "rainy", "windy", "warm", "cold", "cloudy")
_VERBS_PLAY = ("played", "ran", "jumped", "danced", "sang", "laughed")
_OPENINGS = (
    "Once upon a time, there was a {adj} {animal} named {name}.",
    "One day, a {adj} girl named {name} went to the {place}.",
    "There was a {adj} boy named {name} who loved his {thing}.",
    "Once upon a time, {name} lived in a small house near the {place}.",
)
_MIDDLES = (
    "{name} saw a {adj2} {thing} under a tree.",
    "It was a {weather} day, and {name} wanted to play.",
    "{name} {played} with a {animal2} in the {place}.",
    "{name} felt {feeling} because the {thing} was lost.",
    '{name} asked, "Can you help me find my {thing}?"',
    'The {animal2} said, "I will help you!"',
    "They looked and looked, but the {thing} was not there.",
    'Mom said, "Be careful, {name}!"',
    "{name} shared the {thing} with the {animal2}.",
    "Then the sky got dark and it began to rain.",
    '"This is my {thing}!" said {name}. "It is very {adj2}."',
    "Every day, {name} went to the {place} with the {animal2}.",
    "Each {animal2} in the {place} was {feeling}.",
    "{name} is a kind friend, and the {animal2} is not {feeling}.",
)
_ENDINGS = (
    "In the end, {name} found the {thing} and felt {feeling2}.",
    "{name} and the {animal2} became best friends.",
    "From that day on, {name} always played nicely with friends.",
    "{name} went home, ate a cookie, and went to sleep.",
    "{name} learned that sharing makes everyone {feeling2}.",
)


def standin_stories(n: int, seed: int, sentences: tuple[int, int] = (4, 9)) -> list[str]:
    """``n`` simple stories: an opening, ``sentences[0]..sentences[1]`` middle sentences and an ending,
    filled from the child-level lexicon above.

    Args:
        n: stories; seed: every choice is drawn from one numpy stream derived from it.
        sentences: inclusive range of the number of middle sentences.
    Returns:
        ``n`` stories (deterministic in ``(n, seed, sentences)``; story ``i`` does not depend on ``n``).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    lo, hi = sentences
    if not 1 <= lo <= hi:
        raise ValueError(f"sentences must be a range 1 <= lo <= hi, got {sentences}")
    out = []
    for i in range(n):
        rng = np.random.default_rng(derive_seed(seed, "standin-stories", i))  # story i alone: prefixes agree

        def pick(words: tuple[str, ...], rng: np.random.Generator = rng) -> str:
            return words[int(rng.integers(len(words)))]

        fill = {
            "name": pick(_NAMES),
            "animal": pick(_ANIMALS),
            "animal2": pick(_ANIMALS),
            "thing": pick(_THINGS),
            "place": pick(_PLACES),
            "adj": pick(_ADJ),
            "adj2": pick(_ADJ),
            "feeling": pick(_FEELINGS),
            "feeling2": pick(_FEELINGS),
            "weather": pick(_WEATHER),
            "played": pick(_VERBS_PLAY),
        }
        k = int(rng.integers(lo, hi + 1))
        middle = [_MIDDLES[int(j)] for j in rng.choice(len(_MIDDLES), size=min(k, len(_MIDDLES)), replace=False)]
        parts = [pick(_OPENINGS), *middle, pick(_ENDINGS)]
        out.append(" ".join(p.format(**fill) for p in parts))
    return out


def read_stories(path: str | Path, n: int | None = None) -> list[str]:
    """The first ``n`` stories (all when ``None``) of a TinyStories text file.

    Stories are the stripped, non-empty pieces between end-of-story markers ``<|endoftext|>``; the file
    is read in 1 MiB chunks only as far as ``n`` stories need (a story cut by the chunk boundary is
    completed from the next chunk). Reading is linear in the bytes read: the unfinished story carried
    from chunk to chunk is at most :data:`MAX_STORY_BYTES` (a longer run of text without a marker is
    not TinyStories' format and is refused there, not read to the end). A file over
    :data:`PROGRESS_BYTES` shows a progress bar on a terminal.

    Raises:
        ConfigError: naming ``data.stories``: no such file, not a regular file, unreadable, not UTF-8
            text, no end-of-story marker (not TinyStories' format), or fewer than ``n`` stories.
    """
    p = Path(path)
    where = f"data.stories: {echo(str(p))}"
    kind = path_kind(p)
    if kind != "a regular file":
        raise ConfigError(
            f"{where}: {kind}, not a regular file; give a TinyStories text file (stories separated by "
            f"{END_MARKER}) or leave data.stories unset for the built-in stand-in stories"
        )
    stories: list[str] = []
    seen_marker = False
    buf = ""  # the text after the last marker seen: the unfinished story
    try:
        size = p.stat().st_size
        with (
            p.open("rb") as f,
            ProgressBar(
                max(1, size >> 20), "reading data.stories (MiB)", enabled=size > PROGRESS_BYTES and sys.stderr.isatty()
            ) as bar,
        ):
            tail = b""
            while n is None or len(stories) < n:
                raw = f.read(_CHUNK)
                bar.advance(len(raw) / _CHUNK)
                end = not raw
                data = tail + raw
                try:
                    text = data.decode("utf-8")
                    tail = b""
                except UnicodeDecodeError as exc:
                    if end or exc.start < len(data) - 4:  # not a multi-byte character cut by the chunk
                        raise ConfigError(
                            f"{where}: not UTF-8 text (byte {exc.start} of a chunk); give a TinyStories .txt file"
                        ) from None
                    text, tail = data[: exc.start].decode("utf-8"), data[exc.start :]
                if "\x00" in text:
                    raise ConfigError(f"{where}: holds NUL bytes (a binary file?); give a TinyStories .txt file")
                pieces = (buf + text).split(END_MARKER)
                seen_marker = seen_marker or len(pieces) > 1
                buf = pieces.pop()  # the unfinished last piece
                stories.extend(s.strip() for s in pieces if s.strip())
                if len(buf) > MAX_STORY_BYTES:
                    raise ConfigError(
                        f"{where}: {len(buf) >> 10} KiB of text without an end-of-story marker "
                        f"{END_MARKER} (a TinyStories story is a few KiB; at most "
                        f"{MAX_STORY_BYTES >> 20} MiB is read for one): not TinyStories' format"
                    )
                if end:
                    if buf.strip() and seen_marker:
                        stories.append(buf.strip())
                    break
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if not seen_marker:
        raise ConfigError(
            f"{where}: no end-of-story marker {END_MARKER} found; TinyStories' text files separate stories with it"
        )
    if not stories:
        raise ConfigError(f"{where}: holds no story (only markers and white space)")
    if n is not None and len(stories) < n:
        raise ConfigError(
            f"{where}: holds {len(stories)} stories, the run needs {n} (half of data.n_sequences); "
            "give a larger file or lower data.n_sequences"
        )
    return stories[:n] if n is not None else stories
