"""Typed, validated configs with dotted overrides.

Every config is a pydantic model that forbids unknown fields; ``--set a.b=c`` overrides are applied
to a plain dict and the whole config is validated once, so a bad key or value fails before anything
runs, with one message naming the field and what is allowed (:class:`ConfigError`).

Types are strict: a YAML boolean is not an integer, a string is not a number, a float is not an
integer (an integer is a float); every float is finite. Messages are one line, and every value they
echo is cut to :data:`ECHO_CHARS` characters, so a hostile ``--set`` cannot produce a huge message.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator

__all__ = [
    "ECHO_CHARS",
    "Config",
    "ConfigError",
    "Distinct",
    "apply_overrides",
    "build_config",
    "deep_merge",
    "echo",
    "field_exists",
    "one_line",
    "parse_duration",
    "parse_overrides",
    "read_field",
    "validate_config",
]

ECHO_CHARS = 160  # longest echo of a user value in a message (a path of a deep folder fits whole)
MAX_DEPTH = 16  # deepest nesting of lists/mappings a --set value may have
MAX_ERRORS = 3  # validation errors listed in one message (the rest are counted)

C = TypeVar("C", bound="Config")
S = TypeVar("S", bound=Sequence[Any])


def _key(v: Any) -> str:
    """A value's identity as a setting: its ``repr`` (arms may be lists or configs, unhashable), −0.0 as 0.0."""
    return repr(0.0) if isinstance(v, float) and v == 0 else repr(v)


def _each_once(values: S) -> S:
    keys = [_key(v) for v in values]
    if len(set(keys)) != len(keys):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise ValueError(f"list each value once ({', '.join(twice)} more than once)")
    return values


# A list or tuple field whose values are arms, cells or settings, each run once:
# ``lrs: Annotated[list[Annotated[float, Field(gt=0)]], Field(min_length=1), Distinct]``; a repeat is refused
# naming the field and the value, as any other bad value.
Distinct = AfterValidator(_each_once)


class ConfigError(ValueError):
    """Bad user input: an unknown field, a value out of range or of the wrong type, a bad file.

    The message names the field and what is allowed; the CLI prints it and exits with code 2.
    """


def echo(value: Any) -> str:
    """``repr(value)`` for a message: one line, at most :data:`ECHO_CHARS` characters."""
    try:
        text = repr(value)
    except RecursionError:  # a self-referencing or absurdly deep value
        text = f"<{type(value).__name__}>"
    return text if len(text) <= ECHO_CHARS else text[: ECHO_CHARS - 3] + "..."


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(str(text).split())


class Config(BaseModel):
    """Base of all tdlab configs: unknown fields are errors, assignments are validated, types are
    strict (no bool -> int, str -> number or float -> int coercion; int -> float is allowed) and
    floats must be finite. Lists are accepted where a field holds tuples (YAML and JSON have none)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _lists_as_tuples(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: _tuples(v, fields[k].annotation) if k in fields else v for k, v in data.items()}

    def updated(self: C, update: Mapping[str, Any]) -> C:
        """A copy with the fields in ``update`` replaced, validated as a whole (``model_copy(update=...)``
        validates nothing, so a per-arm change could build a config the validators refuse).

        Raises:
            ConfigError: one line naming the field, as for ``--set``.
        """
        return validate_config(type(self), {**self.model_dump(), **update})


def _tuples(value: Any, ann: Any) -> Any:
    """``value`` with every list that ``ann`` types as a tuple made a tuple (strict mode refuses lists
    there, and configs re-read from YAML or JSON have only lists)."""
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated:
        return _tuples(value, args[0])
    if origin in (Union, types.UnionType):
        seqs = [a for a in args if get_origin(a) in (tuple, list) or get_origin(a) is Annotated]
        return _tuples(value, seqs[0]) if len(seqs) == 1 else value
    if not isinstance(value, list):
        return value
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_tuples(v, args[0]) for v in value)
        if len(args) == len(value):
            return tuple(_tuples(v, a) for v, a in zip(value, args, strict=True))
        return tuple(value)  # the wrong length: pydantic names it
    if origin is list and args:
        return [_tuples(v, args[0]) for v in value]
    return value


class _RefusedNode(yaml.YAMLError):
    """A YAML construct that ``--set`` values may not use."""


class _OverrideLoader(yaml.SafeLoader):
    """The YAML loader of ``--set`` values: safe (no tags that build objects), without anchors and
    aliases (a few bytes of nested aliases expand to megabytes), and with YAML 1.2 exponent floats
    (``1e-3`` is a number, not the string PyYAML's YAML 1.1 makes of it)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _RefusedNode("YAML anchors and aliases (&name, *name) are not allowed in --set values")
        return super().compose_node(parent, index)


_OverrideLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _depth(value: Any) -> int:
    """Nesting depth of lists/mappings in ``value`` (a scalar has depth 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def parse_value(raw: str, item: str = "") -> Any:
    """One ``--set`` value, parsed as YAML with :class:`_OverrideLoader`.

    Raises:
        ConfigError: one line, for unparseable YAML, anchors/aliases, tags that build objects, or
            nesting deeper than :data:`MAX_DEPTH`.
    """
    where = f"--set {echo(item or raw)}"
    if not raw.strip():
        return ""
    try:
        value = yaml.load(raw, Loader=_OverrideLoader)
    except _RefusedNode as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{where}: value nested too deeply (at most {MAX_DEPTH} levels)") from None
    except Exception as exc:
        problem = getattr(exc, "problem", None) or str(exc) or type(exc).__name__
        raise ConfigError(
            f"{where}: cannot parse value {echo(raw)} as YAML: {one_line(problem)[:ECHO_CHARS]}"
        ) from None
    if _depth(value) > MAX_DEPTH:
        raise ConfigError(f"{where}: value nested too deeply (at most {MAX_DEPTH} levels)")
    return value


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["a.b=1", "c=[1, 2]"]`` -> nested dict; values are parsed as YAML (:func:`parse_value`)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {echo(item)}: expected KEY=VALUE with a dotted key, e.g. task.p=0.7")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"--set {echo(item)}: empty key segment in {echo(key)}")
        value = parse_value(raw, item)
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {echo(item)}: {echo(part)} is set both as a value and as a section")
        node[leaf] = value
    return out


def read_field(cfg: BaseModel, dotted: str) -> Any:
    """The value of the dotted config field ``dotted`` (``train.steps``) of ``cfg``."""
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def field_exists(model: type[BaseModel], path: str) -> bool:
    """Whether the dotted ``path`` names a field of the pydantic ``model`` (descending into nested
    config classes)."""
    node: Any = model
    for part in path.split("."):
        if not (isinstance(node, type) and issubclass(node, BaseModel)) or part not in node.model_fields:
            return False
        node = node.model_fields[part].annotation
    return True


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``update`` merged in recursively (update wins)."""
    out = copy.deepcopy(dict(base))
    for k, v in update.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _format_validation_error(exc: ValidationError) -> str:
    """One line: the first :data:`MAX_ERRORS` errors, each ``field: what is wrong (got VALUE)``."""
    by_field: dict[str, tuple[list[str], Any]] = {}  # field -> (what is wrong, the value); union arms merged
    for err in exc.errors(include_url=False):
        extra = err["type"] == "extra_forbidden"
        loc = ".".join(str(p) for p in (err["loc"] if extra else _field_loc(err["loc"])))
        loc = (loc if len(loc) <= ECHO_CHARS else echo(loc)) or "(config)"
        msgs, _ = by_field.setdefault(loc, ([], err.get("input")))
        # a validator's own message already says what is wrong: pydantic's "Value error, " prefix adds nothing
        text = err["msg"].removeprefix("Value error, ") if err["type"] == "value_error" else err["msg"]
        msg = "unknown field" if extra else one_line(text)[: 4 * ECHO_CHARS]
        if msg not in msgs:
            msgs.append(msg)
    parts = []
    for loc, (msgs, got) in list(by_field.items())[:MAX_ERRORS]:
        got_s = "" if isinstance(got, dict) or msgs == ["unknown field"] else f" (got {echo(got)})"
        parts.append(f"{loc}: {', or '.join(msgs)}{got_s}")
    if len(by_field) > MAX_ERRORS:
        parts.append(f"and {len(by_field) - MAX_ERRORS} more field(s)")
    return "; ".join(parts)


_UNION_TAGS = {"int", "float", "str", "bool", "none", "list", "tuple", "dict", "set", "bytes"}


def _field_loc(loc: tuple[Any, ...]) -> list[Any]:
    """The field path of a pydantic error location, without the union-member tags pydantic inserts
    (``chunk.constrained-int``, ``grad_clip.float``, ``x.function-after[...]``). A tag never comes
    first, so the first part is kept even when a field's name looks like one (a sweep's ``set``)."""
    return list(loc[:1]) + [p for p in loc[1:] if not isinstance(p, str) or (p.isidentifier() and p not in _UNION_TAGS)]


def _known_fields(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            names.extend(_known_fields(ann, f"{prefix}{name}."))
        else:
            names.append(f"{prefix}{name}")
    return names


def build_config(cls: type[C], *layers: Mapping[str, Any]) -> C:
    """Validate ``cls`` from merged dict layers (later wins): defaults < profile < overrides.

    Raises:
        ConfigError: naming each bad field and the reason; unknown fields list the known ones.
    """
    merged: dict[str, Any] = _field_defaults(cls)
    for layer in layers:
        merged = deep_merge(merged, layer)
    return validate_config(cls, merged)


def _field_defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The explicitly set fields of ``cls``'s default sub-configs, as a nested dict, so a layer that sets
    ``model.d`` changes that field of the *default model* (e.g. an experiment's
    ``TopicModelConfig(onehot=True)``) instead of replacing it by the nested class's own defaults."""
    out: dict[str, Any] = {}
    for name, f in cls.model_fields.items():
        if f.is_required():
            continue
        value = f.get_default(call_default_factory=True)
        if isinstance(value, BaseModel):
            # Only what the default instance sets explicitly: a field left at its class default stays
            # "unset", so validators that ask whether the user gave a value (model_fields_set) still can.
            out[name] = value.model_dump(exclude_unset=True)
    return out


def validate_config(cls: type[C], data: Any) -> C:
    """``cls.model_validate(data)``, with a validation error raised as a one-line :class:`ConfigError`.

    Raises:
        ConfigError: naming each bad field and the reason; unknown fields list the known ones.
    """
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        msg = _format_validation_error(exc)
        if "unknown field" in msg:
            known = _known_fields(cls)
            wrong = msg.split(":", 1)[0]
            # the nearest field, among the leaves and the sections above them (a typo in "trian.steps" is at "trian")
            names = list(
                dict.fromkeys([*known, *(k.rsplit(".", i)[0] for k in known for i in range(1, k.count(".") + 1))])
            )
            close = difflib.get_close_matches(wrong, names, n=1, cutoff=0.6)
            msg += (f"; did you mean {close[0]}?" if close else ".") + " Known fields: " + ", ".join(known)
        raise ConfigError(msg) from None
    except RecursionError:
        raise ConfigError(f"{cls.__name__}: value nested too deeply") from None


def apply_overrides(cfg: C, items: Iterable[str]) -> C:
    """``cfg`` with ``--set`` style overrides applied and re-validated."""
    return build_config(type(cfg), cfg.model_dump(), parse_overrides(items))


def to_yaml(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_DURATION = re.compile(rf"(?:{_NUMBER}h)?(?:{_NUMBER}m)?(?:{_NUMBER}s)?")  # 1h30m, 4m10s


def parse_duration(text: str, option: str = "--budget") -> float:
    """Seconds from ``90s``, ``30m``, ``1.5h``, their sums in that order (``4m10s``, ``1h30m``) or a plain
    number of seconds (at most a week); anything else is a :class:`ConfigError` naming ``option``."""
    t = str(text).strip().lower()
    parts = _DURATION.fullmatch(t) if t else None
    try:
        if parts is not None and any(parts.groups()):
            value = sum(float(v) * u for v, u in zip(parts.groups(), (3600.0, 60.0, 1.0), strict=True) if v)
        else:
            value = float(t)
    except ValueError:
        value = math.nan
    if not 0 < value <= 7 * 24 * 3600:
        raise ConfigError(
            f"{option}: {echo(text)} is not a wall time; allowed: a positive number of seconds, or 90s, 30m, "
            f"1.5h, 4m10s (at most a week)"
        )
    return value
