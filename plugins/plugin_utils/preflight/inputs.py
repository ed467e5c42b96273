# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each PD host's roles get, by Ansible's templar, and whether a value fits its option, by Ansible's ``ArgumentSpecValidator``."""
from __future__ import annotations

import functools
import re
from collections import ChainMap
from collections.abc import Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import ArgumentValueError, ElementError

# What the validator reads of an option: the rest (description, default, required, sub-options)
# is the roles' own business (required sglang_pd_* variables are checked by name).
_VALIDATED_KEYS = ("type", "elements", "choices")
_NOT_A = {"bool": "not a boolean", "int": "not an integer", "float": "not a number", "list": "not a list",
          "dict": "not a dict", "str": "not a string", "path": "not a path"}
_CHECKED: dict = {}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def role_variables(templar, variables, defaults, prefix, host, cache=None):
    """``(values, errors)``: the host's VARIABLES over the role's DEFAULTS, each default templated by TEMPLAR.

    CACHE (one preflight run) holds each templated default by the values it reads: hosts that share them share the result.
    """
    values, errors, scope = {}, [], None
    for name, default in (defaults or {}).items():
        if name in variables:
            values[name] = variables[name]
            continue
        if not _has_template(default):
            values[name] = default
            continue
        key = _cache_key(name, default, variables, values, defaults) if cache is not None else None
        if key is not None and key in cache:
            values[name] = cache[key]
            continue
        if scope is None:
            scope = templar.copy_with_new_env(available_variables=ChainMap(variables, defaults))
        try:
            values[name] = scope.template(default)
        except Exception as exc:  # pylint: disable=broad-except
            errors.append((host, f"{name} cannot be evaluated: {exc}; fix the template or the variables it uses"))
            continue
        if key is not None:
            cache[key] = values[name]
    for name in variables:
        if name.startswith(prefix) and name not in values:
            values[name] = variables[name]
    return values, errors


@functools.lru_cache(maxsize=None)
def _names_in(source):
    """Every identifier a template string holds: a superset of the variables it reads."""
    return tuple(sorted(set(_IDENTIFIER.findall(source))))


def _cache_key(name, default, variables, values, defaults):
    """NAME with the values DEFAULT may read (the host's, else the defaults resolved so far), or None."""
    if not isinstance(default, str):
        return None
    read = []
    for one in _names_in(str(default)):
        if one in variables or one in values or one in defaults:
            value = variables[one] if one in variables else values.get(one, defaults.get(one))
            read.append((one, type(value).__name__, repr(value)))
    return (name, str(default), tuple(read))


def _has_template(value):
    """Whether VALUE holds a Jinja expression or statement (the templar leaves anything else as it is)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_has_template(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_template(item) for item in value)
    return False


def _misread(kind, spec, value):
    """A conversion the validator would make that the roles misread (``"false"`` is truthy; a string iterates by letter)."""
    if kind == "bool" and isinstance(value, str) and not spec.get("switch"):
        return "a string, not a boolean"
    if kind == "list" and not isinstance(value, (list, tuple)):
        return "not a list"
    if kind == "dict" and not isinstance(value, Mapping):
        return "not a dict"
    if kind in ("str", "path") and isinstance(value, (list, tuple, Mapping)):
        return f"a {'dict' if isinstance(value, Mapping) else 'list'}, not a string"
    return None


def type_problem(spec, value):
    """``(text, index)`` of what is wrong with VALUE for option SPEC (INDEX: a list's wrong element), or None."""
    if value is None:
        return None
    # Hosts share most values (group_vars): each (option, value) is checked once.
    key = (tuple((k, repr(spec.get(k))) for k in _VALIDATED_KEYS + ("switch",)), type(value).__name__, repr(value))
    if key not in _CHECKED:
        if len(_CHECKED) > 100000:
            _CHECKED.clear()
        _CHECKED[key] = _type_problem(spec, value)
    return _CHECKED[key]


@functools.lru_cache(maxsize=None)
def _validator(spec_items):
    return ArgumentSpecValidator({"value": dict(spec_items)})


def _type_problem(spec, value):
    kind = spec.get("type", "raw")
    misread = _misread(kind, spec, value)
    if misread:
        return misread, None
    validated = tuple((k, tuple(spec[k]) if isinstance(spec[k], list) else spec[k]) for k in _VALIDATED_KEYS if k in spec)
    errors = _validator(validated).validate({"value": value}).errors.errors
    if not errors:
        return None
    error = errors[0]
    if isinstance(error, ElementError):
        element_spec = {"type": spec["elements"]}
        for index, item in enumerate(value):
            found = type_problem(element_spec, item)
            if found:
                return found[0], index
        return f"its elements are not of type {spec['elements']}", None
    if isinstance(error, ArgumentValueError) and spec.get("choices"):
        return f"not one of {', '.join(str(c) for c in spec['choices'])}", None
    if kind == "bool" and spec.get("switch"):
        return "not a boolean (write true or false)", None
    return _NOT_A.get(kind, f"not of type {kind}"), None
