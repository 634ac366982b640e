"""Policy parameters: the `config.json` shipped with a policy arrives verbatim
in `snapshot.config`; `parse_config` reads it against declared fields.

    from wasmgpu_policy import Field, parse_config

    FIELDS = {
        "zoneLabel": "topology.kubernetes.io/zone",     # a default: a string
        "minFreeMiB": Field(0, type=int, min=0),        # an integer, 0 or more
        "weight": Field(1.0, min=0, max=1),             # a number: 0 and 1 are fine
        "nvlink": Field("prefer", choices=("prefer", "require", "ignore")),
    }
    params = parse_config(snapshot.config, FIELDS)      # a dict, defaults filled in

Every error is a `PolicyError` whose message starts with
`invalid policy config.json:`, names the field and says what to write
instead; `place_each` fails the round with it (`fail`).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, Optional, Tuple

__all__ = ["Field", "PolicyError", "parse_config"]


class PolicyError(Exception):
    """A problem the operator must fix (an invalid config.json, say); what
    `fail` raises."""


_MISSING = object()

# The declarable types, by the name errors use.
_TYPE_NAMES = {bool: "bool", int: "integer", float: "number", str: "string", list: "list", dict: "object"}


class Field:
    """One config field: its `default` (returned when the key is absent),
    its `type` (`bool`, `int`, `float`, `str`, `list` or `dict`; taken from
    the default when not given, and required when the default is None),
    an inclusive range `min`/`max` for numbers, the `choices` allowed, and
    whether JSON `null` is allowed (`nullable`; it reads as None).

    `float` takes any JSON number (`0` and `0.5` alike, returned as a
    float); `int` takes integers only (`2`, not `2.5` nor `2.0`); `bool`
    takes only `true`/`false`, never `0`/`1`. A plain default given instead
    of a Field (the older form `{"preferNvlink": True}`) is
    `Field(default)`, except that a float default takes any number."""

    __slots__ = ("default", "type", "min", "max", "choices", "nullable")

    def __init__(
        self,
        default: Any = None,
        *,
        type: Optional[type] = None,  # noqa: A002 - the natural name
        min: Optional[float] = None,  # noqa: A002
        max: Optional[float] = None,  # noqa: A002
        choices: Optional[Iterable[Any]] = None,
        nullable: bool = False,
    ):
        if type is None:
            if default is None:
                raise TypeError("Field: give a `type` when the default is None")
            type = _type_of(default)
        if type not in _TYPE_NAMES:
            raise TypeError(f"Field: type must be one of bool, int, float, str, list, dict, not {type!r}")
        if (min is not None or max is not None) and type not in (int, float):
            raise TypeError("Field: min and max apply to int and float fields only")
        self.default = default
        self.type = type
        self.min = min
        self.max = max
        self.choices: Optional[Tuple[Any, ...]] = tuple(choices) if choices is not None else None
        self.nullable = nullable or default is None

    def __repr__(self) -> str:
        parts = [repr(self.default), f"type={self.type.__name__}"]
        for name in ("min", "max", "choices"):
            if getattr(self, name) is not None:
                parts.append(f"{name}={getattr(self, name)!r}")
        if self.nullable:
            parts.append("nullable=True")
        return f"Field({', '.join(parts)})"

    def describe(self) -> str:
        """What the field takes, in words (used in errors)."""
        if self.choices is not None:
            what = "one of " + ", ".join(_json(c) for c in self.choices)
        elif self.type is bool:
            what = "a bool (true or false)"
        elif self.type is int:
            what = "an integer"
        elif self.type is float:
            what = "a number"
        elif self.type is str:
            what = "a string"
        elif self.type is list:
            what = "a list"
        else:
            what = "an object"
        if self.min is not None and self.max is not None:
            what += f" from {_num(self.min)} to {_num(self.max)}"
        elif self.min is not None:
            what += f" of at least {_num(self.min)}"
        elif self.max is not None:
            what += f" of at most {_num(self.max)}"
        if self.nullable:
            what += ", or null"
        return what

    def read(self, key: str, value: Any) -> Any:
        """`value` (parsed JSON) checked against the field; raises
        `PolicyError` naming `key` when it does not fit."""
        if value is None:
            if self.nullable:
                return None
            raise _bad(key, self, value)
        if self.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                value = float(value)
        elif self.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = type(value) is self.type
        if not ok:
            raise _bad(key, self, value)
        if self.min is not None and value < self.min:
            raise _bad(key, self, value)
        if self.max is not None and value > self.max:
            raise _bad(key, self, value)
        if self.choices is not None and value not in self.choices:
            raise _bad(key, self, value)
        return value


def _type_of(default: Any) -> type:
    for kind in (bool, int, float, str, list, dict):
        if type(default) is kind:
            return kind
    raise TypeError(f"Field: no config type for a default of {type(default).__name__}")


def _num(x: float) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _bad(key: str, field: Field, value: Any) -> PolicyError:
    got = _json(value)
    fix = f"set `{key}` to {field.describe()}"
    if field.type is int and isinstance(value, float) and value.is_integer():
        fix += f" (write {int(value)}, without the decimal point)"
    elif field.default is not None or field.nullable:
        fix += f", or leave it out for the default {_json(field.default)}"
    return PolicyError(f"invalid policy config.json: `{key}` must be {field.describe()}, got {got}; {fix}")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _pairs(pairs):
    seen: Dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


class _Duplicate(Exception):
    pass


def parse_config(config: str, fields: Dict[str, Any]) -> Dict[str, Any]:
    """Parses the snapshot's config string against `fields` (key → `Field`,
    or key → a plain default: `{"preferNvlink": True}`). Empty (or all
    blanks) gives the defaults; otherwise it must be a JSON object whose
    keys are keys of `fields`, each at most once, with values the fields
    take. Returns a dict of every field (the defaults filled in). Raises
    `PolicyError` naming the field and the fix, its message starting with
    `invalid policy config.json:` (`fail` it, or put it in a `wait`
    reason)."""
    specs = {key: f if isinstance(f, Field) else Field(f) for key, f in fields.items()}
    if not config.strip():
        return {key: f.default for key, f in specs.items()}
    try:
        parsed = json.loads(config, object_pairs_hook=_pairs, parse_constant=_reject_constant)
    except _Duplicate as e:
        raise PolicyError(f"invalid policy config.json: duplicate field `{e.args[0]}`; give it once") from None
    except ValueError as e:
        raise PolicyError(f"invalid policy config.json: {e}; write one JSON object, such as {{}}") from None
    if not isinstance(parsed, dict):
        raise PolicyError(
            f"invalid policy config.json: expected a JSON object, got {_json(parsed)}; write one such as {{}}"
        )
    out = {key: f.default for key, f in specs.items()}
    for key, value in parsed.items():
        spec = specs.get(key)
        if spec is None:
            expected = ", ".join(f"`{k}`" for k in specs) or "none"
            close = [k for k in specs if k.lower() == key.lower()]
            hint = f"; did you mean `{close[0]}`?" if close else "; remove it or fix its spelling"
            raise PolicyError(f"invalid policy config.json: unknown field `{key}`, expected one of {expected}{hint}")
        out[key] = spec.read(key, value)
    return out
