"""Typed, validated configs with dotted overrides.

Every config is a pydantic model that forbids unknown fields; ``--set a.b=c`` overrides are applied
to a plain dict and the whole config is validated once, so a bad key or value fails before anything
runs, with one message naming the field and what is allowed (:class:`ConfigError`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["Config", "ConfigError", "parse_overrides", "apply_overrides", "build_config", "deep_merge"]

C = TypeVar("C", bound="Config")


class ConfigError(ValueError):
    """Bad user input: an unknown field, a value out of range or of the wrong type, a bad file.

    The message names the field and what is allowed; the CLI prints it and exits with code 2.
    """


class Config(BaseModel):
    """Base of all tdlab configs: unknown fields are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["a.b=1", "c=[1, 2]"]`` -> nested dict; values are parsed as YAML scalars/lists."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted key, e.g. task.p=0.7")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"--set {item!r}: empty key segment in {key!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: cannot parse value {raw!r}: {exc}") from None
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is set both as a value and as a section")
        node[leaf] = value
    return out


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
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(config)"
        if err["type"] == "extra_forbidden":
            lines.append(f"{loc}: unknown field")
        else:
            got = err.get("input")
            got_s = "" if isinstance(got, dict) else f" (got {got!r})"
            lines.append(f"{loc}: {err['msg']}{got_s}")
    return "; ".join(lines)


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
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, layer)
    try:
        return cls.model_validate(merged)
    except ValidationError as exc:
        msg = _format_validation_error(exc)
        if "unknown field" in msg:
            msg += ". Known fields: " + ", ".join(_known_fields(cls))
        raise ConfigError(msg) from None


def apply_overrides(cfg: C, items: Iterable[str]) -> C:
    """``cfg`` with ``--set`` style overrides applied and re-validated."""
    return build_config(type(cfg), cfg.model_dump(), parse_overrides(items))


def to_yaml(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
