"""Object ids and ref names as dulwich's API types them.

agentfs passes commit ids and ref names around as plain `bytes` (hex ids,
`refs/heads/...`). dulwich's signatures type them as `ObjectID` and `Ref`,
`NewType`s of `bytes`: the same value at run time, a different type to mypy.
Calls into dulwich that take an id or a ref name convert here, so the
difference is stated once instead of as casts at every call.
"""

from __future__ import annotations

from collections.abc import Iterable

from dulwich.objects import ObjectID
from dulwich.refs import Ref

__all__ = ["object_id", "object_ids", "ref"]


def object_id(sha: bytes) -> ObjectID:
    """A hex object id (40 ASCII bytes) as dulwich types it."""
    return ObjectID(sha)


def object_ids(shas: Iterable[bytes]) -> list[ObjectID]:
    """Hex object ids (e.g. a commit's parents) as dulwich types them."""
    return [ObjectID(sha) for sha in shas]


def ref(name: bytes) -> Ref:
    """A ref name (`HEAD`, `refs/heads/main`, a prefix of ref names) as dulwich types it."""
    return Ref(name)
