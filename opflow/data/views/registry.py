"""The registry of view kinds: kind name -> :class:`~opflow.data.views.base.ViewKind` instance.

The built-in kinds are registered by :mod:`opflow.data.views` (one line each); others with
:func:`register` from any module, e.g. a test. Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any

from ..view_spec import VIEW_KINDS, register_spec, unregister_spec
from .base import ViewKind

#: the kind that is no kind of its own: resolved from the file (:func:`opflow.data.views.auto.infer_view_kind`)
AUTO = "auto"

_KINDS: dict[str, ViewKind] = {}


def register(kind: ViewKind, *, replace: bool = False) -> ViewKind:
    """Make ``kind`` available as ``view.kind: <kind.name>``; returns it (usable as a one-liner).

    A name already taken raises :class:`ValueError` unless ``replace`` is true.
    """
    if not isinstance(kind, ViewKind):
        raise TypeError(f"a view kind must be an instance of opflow.data.views.ViewKind, got {kind!r}")
    name = kind.name
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a view kind's name must be a Python identifier, got {name!r}")
    if name == AUTO:
        raise ValueError(f"{AUTO!r} is not a kind of its own: it picks one from the file")
    if name in _KINDS and not replace and _KINDS[name] is not kind:
        raise ValueError(f"view kind {name!r} is already registered ({type(_KINDS[name]).__qualname__}); pass replace=True to replace it")
    spec = kind.spec
    if spec.model_fields["kind"].default != name:
        raise ValueError(f"view kind {name!r}: its spec {spec.__name__} has kind {spec.model_fields['kind'].default!r}")
    register_spec(spec)
    _KINDS[name] = kind
    return kind


def unregister(name: str) -> ViewKind:
    """Remove the kind ``name`` from the registry (tests); returns it."""
    try:
        kind = _KINDS.pop(name)
    except KeyError:
        raise KeyError(f"view kind {name!r} is not registered; registered: {list(_KINDS)}") from None
    if name not in VIEW_KINDS:  # a built-in specification stays
        unregister_spec(name)
    return kind


def registered_kinds() -> tuple[str, ...]:
    """Names of the registered kinds, in registration order (``auto`` is not one)."""
    return tuple(_KINDS)


def get_kind(name: str) -> ViewKind:
    """The registered kind ``name``; :class:`KeyError` naming the registered ones otherwise."""
    try:
        return _KINDS[name]
    except (KeyError, TypeError):
        raise KeyError(f"no view kind {name!r}; registered: {list(_KINDS)}") from None


def find_kind(name: Any) -> ViewKind | None:
    """The registered kind ``name``, or None (also for names that are not strings)."""
    return _KINDS.get(name) if isinstance(name, str) else None


def kind_of(dataset: Any) -> ViewKind:
    """The kind that built ``dataset``.

    :func:`opflow.data.views.make_dataset` records it on the dataset (``dataset.view_impl``); a
    dataset built directly from its class is looked up by its view's kind (trajectory datasets) or
    its own ``kind`` attribute (grid, series, mesh).
    """
    impl = getattr(dataset, "view_impl", None)
    if isinstance(impl, ViewKind):
        return impl
    for name in (getattr(getattr(dataset, "view", None), "kind", None), getattr(dataset, "kind", None)):
        found = find_kind(name)
        if found is not None:
            return found
    raise LookupError(f"{type(dataset).__qualname__} was not built by opflow.data.views.make_dataset and names no registered view kind")
