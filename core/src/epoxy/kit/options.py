"""One table of a provider's options: parsed, validated and described by the same rules.

Why: every provider used to parse ``providers=[("name", {...})]`` with its own code, so the
same spelling meant different things (``"yes"`` was a bool for one provider and an error for
another). A provider now declares its options once, as :class:`Option` rows of an
:class:`OptionTable`; ``table.parse(options)`` gives its typed result (typically the
provider's frozen options dataclass) and ``table.describe()`` is what the factory's
``options()`` returns, so what ``epoxy providers`` shows is exactly what ``create`` accepts.

The rules, the same for every provider (values may be native Python values or the strings
onnxruntime users pass as provider options):

- ``None`` means the default, as if the option were not given.
- ``bool``: ``True``/``False``, ``1``/``0``, or the strings ``"true"``/``"false"``/
  ``"1"``/``"0"`` in any case (onnxruntime's spellings). Nothing else: ``"yes"``, ``"on"``
  or ``2`` are refused rather than guessed.
- ``int``: an int (never a bool) or a decimal string such as ``"4"``.
- ``float``: a finite number or a string such as ``"0.5"``.
- ``enum``: a string equal to one of ``choices`` ignoring case and surrounding spaces; the
  result is the declared spelling.
- ``str``: a non-empty string, stripped. ``path``: a str or ``os.PathLike`` -> ``pathlib.Path``.
- ``list``: ``"a, b"`` or a list/tuple/set of strings -> a tuple of non-empty stripped strings.
- ``dict``: a mapping with str keys, or a JSON object string -> a dict.
- ``aliases`` (any kind): other spellings of a value, matched ignoring case before the kind
  parses, e.g. ``{"fp16": "f16"}`` or ``{"default": None}``.
- Ranges (``minimum``/``maximum``) are inclusive; ``env`` names an environment variable read
  when the option is not given.

Unknown names and bad values raise :class:`~epoxy.errors.InvalidArgumentError` naming the
provider, the option, what was given and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from ..errors import InvalidArgumentError

T = TypeVar("T")


@dataclass(frozen=True)
class Kind:
    """How one kind of option value is parsed and described.

    ``parse(value, option)`` returns the parsed value or raises ``ValueError``/``TypeError``
    (the table turns that into the user-facing error); ``describe`` is the allowed values as
    ``options()`` shows them ("int >= 0"), ``expect`` the same for an error message ("an int
    >= 0"; defaults to ``describe``). A provider may pass its own ``Kind`` as an option's kind.
    """

    parse: Callable[[Any, Option], Any]
    describe: str | Callable[[Option], str]
    expect: str | Callable[[Option], str] | None = None

    def described(self, option: Option) -> str:
        return self.describe(option) if callable(self.describe) else self.describe

    def expected(self, option: Option) -> str:
        text = self.expect if self.expect is not None else self.describe
        return text(option) if callable(text) else text


# -- the kinds --------------------------------------------------------------------------------
_BOOL_WORDS = {"true": True, "1": True, "false": False, "0": False}
_INT = re.compile(r"[+-]?[0-9]+")


def _parse_bool(value: Any, option: Option) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
        return _BOOL_WORDS[value.strip().lower()]
    raise ValueError(value)


def _in_range(number: float, option: Option) -> None:
    if (option.minimum is not None and number < option.minimum) or (
            option.maximum is not None and number > option.maximum):
        raise ValueError(number)


def _range(option: Option) -> str:
    low, high = option.minimum, option.maximum
    if low is not None and high is not None:
        return f" in [{low:g}, {high:g}]"
    if low is not None:
        return f" >= {low:g}"
    return f" <= {high:g}" if high is not None else ""


def _parse_int(value: Any, option: Option) -> int:
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, numbers.Integral):
        number = int(value)
    elif isinstance(value, str) and _INT.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        raise ValueError(value)
    _in_range(number, option)
    return number


def _parse_float(value: Any, option: Option) -> float:
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise TypeError(value)
    number = float(value.strip() if isinstance(value, str) else value)
    if not math.isfinite(number):
        raise ValueError(value)
    _in_range(number, option)
    return number


def _parse_enum(value: Any, option: Option) -> str:
    if isinstance(value, str):
        key = value.strip().lower()
        for choice in option.choices:
            if choice.lower() == key:
                return choice
    raise ValueError(value)


def _parse_str(value: Any, option: Option) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(value)
    return value.strip()


def _parse_path(value: Any, option: Option) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(value)
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(value)
    return Path(text)


def _parse_list(value: Any, option: Option) -> tuple[str, ...]:
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(item, str) for item in value):
        items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)  # sets: a stable order
    else:
        raise TypeError(value)
    parsed = tuple(item.strip() for item in items if item.strip())
    if not parsed:
        raise ValueError(value)
    return parsed


def _parse_dict(value: Any, option: Option) -> dict[str, Any]:
    if isinstance(value, str):
        value = json.loads(value)  # a JSONDecodeError is a ValueError
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ValueError(value)
    return dict(value)


#: kind name -> how it parses and reads; ``Option(kind=...)`` takes a name or a :class:`Kind`
KINDS: dict[str, Kind] = {
    "bool": Kind(_parse_bool, "True | False", "True or False (or 1, 0, 'true', 'false' in any case)"),
    "int": Kind(_parse_int, lambda o: "int" + _range(o), lambda o: "an int" + _range(o)),
    "float": Kind(_parse_float, lambda o: "number" + _range(o), lambda o: "a number" + _range(o)),
    "enum": Kind(_parse_enum, lambda o: " | ".join(o.choices), lambda o: f"one of {list(o.choices)}"),
    "str": Kind(_parse_str, "string", "a non-empty string"),
    "path": Kind(_parse_path, "path", "a path (str or os.PathLike)"),
    "list": Kind(_parse_list, "comma-separated list", "a comma-separated string or a list of strings"),
    "dict": Kind(_parse_dict, "mapping or JSON object", "a mapping with str keys or a JSON object string"),
}


# -- one option -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One declared option. ``help`` is one line saying what it does; the allowed values and
    the default are added by :meth:`OptionTable.describe`, ``notes`` (one line) after them.
    ``default_text`` replaces the shown default where the value says little (``None``).
    ``convert`` turns a parsed, non-None value into what the provider stores (``os.fspath``)."""

    name: str
    kind: str | Kind
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    aliases: Mapping[str, Any] = field(default_factory=dict)
    minimum: float | None = None
    maximum: float | None = None
    env: str | None = None
    default_text: str | None = None
    notes: str = ""
    convert: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.kind, str) and self.kind not in KINDS:
            raise ValueError(f"option {self.name!r}: unknown kind {self.kind!r}; kinds: {sorted(KINDS)}")
        if isinstance(self.kind, str) and (self.kind == "enum") != bool(self.choices):
            raise ValueError(f"option {self.name!r}: choices go with kind 'enum', and 'enum' needs them")
        for text in (self.help, self.notes, self.default_text or ""):
            if "\n" in text:
                raise ValueError(f"option {self.name!r}: help, notes and default_text must be one line")
        if not self.help.strip():
            raise ValueError(f"option {self.name!r}: help must say what the option does")

    @property
    def parser(self) -> Kind:
        return KINDS[self.kind] if isinstance(self.kind, str) else self.kind

    def _own_aliases(self) -> list[str]:
        """Aliases with a meaning of their own (shown); mere synonyms of a choice are not."""
        return [alias for alias, value in self.aliases.items() if value not in self.choices]

    def allowed(self) -> str:
        """The allowed values as ``options()`` shows them."""
        return " | ".join([self.parser.described(self), *self._own_aliases()])

    def expected(self) -> str:
        """The allowed values as an error message names them."""
        own = self._own_aliases()
        return self.parser.expected(self) + (f" or one of {own}" if own else "")

    def shown_default(self) -> str:
        text = self.default_text if self.default_text is not None else _show(self.default)
        return text + (f" or ${self.env}" if self.env else "")

    def describe(self) -> str:
        line = f"{self.help}: {self.allowed()} (default {self.shown_default()})"
        return f"{line}; {self.notes}" if self.notes else line

    def parse(self, value: Any) -> Any:
        """The parsed value; ``ValueError``/``TypeError`` when ``value`` is not allowed."""
        if isinstance(value, str):
            folded = {alias.lower(): target for alias, target in self.aliases.items()}
            if value.strip().lower() in folded:
                return folded[value.strip().lower()]
        parsed = self.parser.parse(value, self)
        return self.convert(parsed) if self.convert is not None and parsed is not None else parsed


def _show(value: Any) -> str:
    """A default as users would type it."""
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (frozenset, set)):
        value = sorted(value, key=str)
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, Mapping):
        return json.dumps(dict(value))
    return str(value)


# -- the table --------------------------------------------------------------------------------
class OptionTable(Generic[T]):
    """A provider's options, declared once: ``parse`` for ``create``, ``describe`` for
    ``options()``. ``result`` builds the typed result from every option's value by name
    (default: a read-only mapping); a dataclass ``result`` must have exactly the options as
    fields, with the same defaults, so the two declarations cannot drift apart."""

    def __init__(self, provider: str, options: Iterable[Option],
                 result: Callable[..., T] | None = None) -> None:
        self.provider = provider
        self.options: dict[str, Option] = {}
        for option in options:
            if option.name in self.options:
                raise ValueError(f"{provider} provider: option {option.name!r} declared twice")
            self.options[option.name] = option
        self.result = result
        if isinstance(result, type) and dataclasses.is_dataclass(result):
            self._check_dataclass(result)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.options)

    def describe(self) -> dict[str, str]:
        """Option name -> one line of help with the allowed values and the default."""
        return {name: option.describe() for name, option in self.options.items()}

    def parse(self, options: Mapping[str, Any] | None) -> T:
        """The typed result of user ``options``; unknown names and bad values raise
        :class:`~epoxy.errors.InvalidArgumentError` before anything is built."""
        given = dict(options or {})
        self._reject_unknown(given)
        values = {name: self._value(option, given.get(name)) for name, option in self.options.items()}
        if self.result is None:
            return MappingProxyType(values)  # type: ignore[return-value]
        return self.result(**values)

    def _value(self, option: Option, value: Any) -> Any:
        source = f"option {option.name}"
        if value is None and option.env and os.environ.get(option.env, "").strip():
            value, source = os.environ[option.env], f"option {option.name} from ${option.env}"
        if value is None:
            return copy.deepcopy(option.default)
        try:
            return option.parse(value)
        except (ValueError, TypeError):
            raise InvalidArgumentError(
                f"{self.provider} provider: {source}={value!r}; expected {option.expected()}") from None

    def _reject_unknown(self, given: Mapping[Any, Any]) -> None:
        unknown = sorted((name for name in given if name not in self.options), key=str)
        if not unknown:
            return
        message = f"{self.provider} provider: unknown options {unknown}; known options: {sorted(self.options)}"
        guess = difflib.get_close_matches(str(unknown[0]), list(self.options), n=1) if len(unknown) == 1 else []
        raise InvalidArgumentError(message + (f"; did you mean {guess[0]!r}?" if guess else ""))

    def _check_dataclass(self, cls: type) -> None:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if set(fields) != set(self.options):
            raise TypeError(f"{self.provider} provider: {cls.__name__} fields {sorted(fields)} are not "
                            f"the declared options {sorted(self.options)}")
        for name, option in self.options.items():
            f = fields[name]
            factory = f.default_factory
            default = factory() if factory is not dataclasses.MISSING else f.default
            if default is dataclasses.MISSING or default != option.default:
                raise TypeError(f"{self.provider} provider: {cls.__name__}.{name} defaults to "
                                f"{default!r}, the option to {option.default!r}")
