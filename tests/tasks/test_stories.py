"""Stories for the real-text experiment: the stand-in generator is deterministic; a
TinyStories file is split on its end-of-story marker, read only as far as needed; a missing or
malformed file is one ConfigError naming data.stories."""

from __future__ import annotations

import pytest

from tdlab.config import ConfigError
from tdlab.tasks import stories as st
from tdlab.tasks.stories import END_MARKER, read_stories, standin_stories


def test_standin_is_deterministic_and_prefix_stable():
    a = standin_stories(50, seed=3)
    assert a == standin_stories(50, seed=3)
    assert standin_stories(10, seed=3) == a[:10]
    assert a != standin_stories(50, seed=4)
    assert len(set(a)) == 50 and all(s.endswith(".") and len(s.split()) > 15 for s in a)
    assert all(END_MARKER not in s for s in a)


def test_reads_tinystories_format(tmp_path):
    p = tmp_path / "ts.txt"
    p.write_text(
        f"One day a cat.\n{END_MARKER}\n  Tom ran home.  \n{END_MARKER}\n\n{END_MARKER}\nLast story without marker.\n",
        encoding="utf-8",
    )
    assert read_stories(p) == ["One day a cat.", "Tom ran home.", "Last story without marker."]
    assert read_stories(p, 2) == ["One day a cat.", "Tom ran home."]


def test_chunk_boundaries_do_not_cut_stories_or_characters(tmp_path, monkeypatch):
    stories = [f"Story {i}: ünïcode {'é' * (i % 7)} end." for i in range(200)]
    p = tmp_path / "ts.txt"
    p.write_text(f"\n{END_MARKER}\n".join(stories) + f"\n{END_MARKER}\n", encoding="utf-8")
    monkeypatch.setattr(st, "_CHUNK", 7)  # markers and multi-byte characters straddle chunks
    assert read_stories(p) == stories
    assert read_stories(p, 13) == stories[:13]


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "no such file"),
        ("dir", "not a regular file"),
        (b"\xff\xfe\x00binary", "not UTF-8"),
        ("a story but no marker at all", "no end-of-story marker"),
        (f"{END_MARKER}\n  \n{END_MARKER}", "holds no story"),
        (f"one\n{END_MARKER}\ntwo\n{END_MARKER}", "holds 2 stories, the run needs 5"),
    ],
)
def test_bad_files_are_one_config_error_naming_the_field(tmp_path, content, match):
    p = tmp_path / "ts.txt"
    if content == "dir":
        p.mkdir()
    elif isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=f"data.stories: .*{match}"):
        read_stories(p, 5)


def test_text_without_markers_is_refused_after_one_story_s_worth_not_read_to_the_end(tmp_path, monkeypatch):
    """1 GB without end-of-story markers hung: the reader was superlinear (32/64/128 MB: 0.5/1.4/7.2 s)
    and read to the end. Now the unfinished story is bounded, so reading stops within MAX_STORY_BYTES."""
    p = tmp_path / "big.txt"
    block = ("once upon a time there was a dog. " * 30000).encode()  # ~1 MiB
    with open(p, "wb") as f:
        for _ in range(64):
            f.write(block)
    read = []
    real_open = type(p).open

    def counting_open(self, *args, **kwargs):
        fh = real_open(self, *args, **kwargs)
        real_read = fh.read

        def counted(n=-1):
            data = real_read(n)
            read.append(len(data))
            return data

        fh.read = counted
        return fh

    monkeypatch.setattr(type(p), "open", counting_open)
    with pytest.raises(ConfigError, match=r"data\.stories: .*without an end-of-story marker") as err:
        read_stories(p, 10)
    assert "\n" not in str(err.value)
    assert sum(read) <= st.MAX_STORY_BYTES + 2 * st._CHUNK  # not the 64 MiB


def test_reading_many_stories_is_linear_in_the_bytes(tmp_path):
    """Every chunk is split once, with at most one unfinished story carried over: the work per chunk is
    bounded, so the stories of a file come out whole, whatever their count (and long ones across chunks)."""
    p = tmp_path / "many.txt"
    long_story = "word " * 700_000  # 3.5 MB: far longer than any story (MAX_STORY_BYTES), refused
    stories = [f"story {i} " + "a b c " * (i % 50) for i in range(40_000)]
    p.write_text(END_MARKER.join(stories) + END_MARKER)
    got = read_stories(p)
    assert got == [s.strip() for s in stories]
    p.write_text(f"short.{END_MARKER}{long_story}{END_MARKER}")
    with pytest.raises(ConfigError, match="without an end-of-story marker"):
        read_stories(p)
