"""tdlab.config_fields: every field of a config class with its kinds, bounds, literals, item kinds and
the comment its source gives it (what `tdlab run NAME --help` prints and the fuzz draws from)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tdlab.config import Config
from tdlab.config_fields import config_fields, field_comments


class Inner(Config):
    rate: float = Field(0.5, gt=0.0, lt=1.0)  # Eq. (3): the rate
    # An explanation above the field,
    # on two lines.
    count: int = Field(3, ge=1, le=4096)


class Outer(Config):
    inner: Inner = Inner()
    mode: Literal["a", "b"] = "a"  # which mode
    chunk: int | Literal["auto"] = "auto"
    names: list[Literal["x", "y"]] = ["x"]
    pair: tuple[float, float] = (0.0, 1.0)
    path: str | None = Field(None, description="a file to read")  # the description wins over this


def test_fields_are_walked_and_described():
    f = {x.key: x for x in config_fields(Outer)}
    assert list(f) == ["inner.rate", "inner.count", "mode", "chunk", "names", "pair", "path"]
    assert f["inner.rate"].type_text == "float in (0, 1)" and f["inner.rate"].doc == "Eq. (3): the rate"
    assert (
        f["inner.count"].type_text == "int in [1, 4096]"
        and f["inner.count"].doc == "An explanation above the field, on two lines."
    )
    assert f["mode"].literals == {"a", "b"} and f["mode"].type_text == "'a' | 'b'" and f["mode"].doc == "which mode"
    assert f["chunk"].kinds == {"int", "literal"} and f["chunk"].doc == ""
    assert f["names"].kinds == {"list"} and f["names"].item_kinds == {"literal"} and f["names"].literals == {"x", "y"}
    assert f["pair"].type_text == "list of float" and f["pair"].item_kinds == {"float"}
    assert f["path"].kinds == {"str", "none"} and f["path"].doc == "a file to read"


def test_inherited_fields_take_the_comment_of_the_class_that_declares_them():
    class Child(Inner):
        count: int = Field(5, ge=1)  # the child's own word

    assert field_comments(Child) == {"rate": "Eq. (3): the rate", "count": "the child's own word"}
