"""gmsh generators of two-dimensional Darcy domains, written as ``.msh`` files.

Every domain lies in the unit square and touches all four of its sides, so its bounding box is
``[0, 1]^2`` and a coefficient sampled on the node grid of the unit square (the FNO Darcy protocol,
see ``PROTOCOLS.md``) covers it without rescaling:

========== ============================================================ ============================
name       domain                                                       exact area
========== ============================================================ ============================
square     ``(0, 1)^2`` (unstructured triangles)                        1
l_shape    ``(0, 1)^2`` minus ``[c, 1] x [c, 1]`` (re-entrant corner)   ``1 - (1 - c)^2``
perforated ``(0, 1)^2`` minus closed disks ``holes = ((cx, cy, r), ...)`` ``1 - sum(pi r^2)``
disk       the disk of radius 1/2 centred at ``(1/2, 1/2)``             ``pi / 4``
========== ============================================================ ============================

The geometry is built with the OpenCASCADE kernel and meshed with linear triangles of uniform
target size ``mesh_size`` (Frontal-Delaunay, one thread, so the same parameters give the same
mesh). Each file has two physical groups: ``domain`` (dimension 2, tag 1) with every triangle and
``boundary`` (dimension 1, tag 2) with every boundary segment, outer and hole boundaries alike.
Files are written under a temporary name in the target folder and renamed when complete.

Mesh size. ``mesh_size`` is the one knob of every domain. It is checked before meshing (in
``(0, 0.5]`` and at least ``1e-3``; at most the smallest hole radius, so a hole is a polygon of at
least 7 sides; at most the L-shape's narrowest arm) and the mesh is checked after meshing, before
it is written (:func:`check_mesh`): every triangle counter-clockwise with positive area, smallest
angle at least :data:`MIN_ANGLE_DEG`, longest edge at most ``1.5 mesh_size``, and the area
within the polygonal approximation bound of the exact area (exact for polygons, within
``1.5 pi h^2 / 6`` per circle). A violation raises :class:`ConfigError` naming ``mesh_size``.
:func:`mesh_stats` reads the counts and quality of a written file (no dolfinx).

gmsh keeps one global state per process: :func:`gmsh_session` initialises it only when nobody else
has, finalises only what it initialised, works in a model of its own that it removes afterwards,
restores the options it changes, and holds a lock so threads do not interleave.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opflow.atomic import atomic_path
from opflow.data.errors import ConfigError

#: the names accepted by :func:`generate_mesh`
DOMAINS = ("square", "l_shape", "perforated", "disk")
#: physical group tags written to every file
DOMAIN_TAG, BOUNDARY_TAG = 1, 2
#: the default perforation: a 3 x 3 array of holes of radius 0.1 centred in the thirds
DEFAULT_HOLES: tuple[tuple[float, float, float], ...] = tuple(
    (cx, cy, 0.1) for cy in (1 / 6, 1 / 2, 5 / 6) for cx in (1 / 6, 1 / 2, 5 / 6)
)
#: bump when the geometry code changes, so cached meshes are rebuilt
_GEOMETRY_VERSION = 1
#: the smallest interior angle a written mesh may have (Frontal-Delaunay gives about 25-30 degrees)
MIN_ANGLE_DEG = 15.0

_LOCK = threading.RLock()

# options set for meshing, restored afterwards
_OPTIONS = {
    "General.Terminal": 0,
    "General.Verbosity": 1,
    "General.NumThreads": 1,
    "Mesh.Algorithm": 6,
    "Mesh.ElementOrder": 1,
    "Mesh.MeshSizeFromPoints": 0,
    "Mesh.MeshSizeFromCurvature": 0,
    "Mesh.MeshSizeExtendFromBoundary": 1,
    "Mesh.MeshSizeMin": 0.0,
    "Mesh.MshFileVersion": 4.1,
    "Mesh.Binary": 0,
    "Mesh.SaveAll": 0,
}


@contextlib.contextmanager
def gmsh_session(model_name: str = "opflow") -> Iterator[Any]:
    """Yield the ``gmsh`` module with a fresh current model; see the module doc for the rules."""
    import gmsh

    with _LOCK:
        owner = not gmsh.isInitialized()
        if owner:
            gmsh.initialize(readConfigFiles=False, interruptible=False)
        saved = {k: gmsh.option.getNumber(k) for k in _OPTIONS}
        name = f"{model_name}-{uuid.uuid4().hex[:8]}"
        gmsh.model.add(name)
        try:
            for k, v in _OPTIONS.items():
                gmsh.option.setNumber(k, v)
            yield gmsh
        finally:
            with contextlib.suppress(Exception):
                gmsh.model.setCurrent(name)
                gmsh.model.remove()
            for k, v in saved.items():
                with contextlib.suppress(Exception):
                    gmsh.option.setNumber(k, v)
            if owner:
                gmsh.finalize()


@contextlib.contextmanager
def open_msh(path: str | os.PathLike) -> Iterator[Any]:
    """Yield the ``gmsh`` module with the mesh file ``path`` loaded as the current model."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"mesh file {str(path)!r} does not exist; give the path of a gmsh .msh file")
    with gmsh_session("msh") as gmsh:
        try:
            gmsh.merge(str(path))
        except Exception as e:
            raise ConfigError(f"gmsh cannot read {str(path)!r} ({e}); give a gmsh .msh file") from None
        yield gmsh


def _normalise_holes(holes: Any) -> tuple[tuple[float, float, float], ...]:
    try:
        out = tuple((float(cx), float(cy), float(r)) for cx, cy, r in holes)
    except (TypeError, ValueError):
        raise ConfigError(f"holes must be a list of (cx, cy, r) triples, got {holes!r}") from None
    if not out:
        raise ConfigError("perforated domain needs at least one hole (cx, cy, r)")
    for k, (cx, cy, r) in enumerate(out):
        if not (r > 0 and cx - r > 0 and cx + r < 1 and cy - r > 0 and cy + r < 1):
            raise ConfigError(f"hole {k} (cx={cx}, cy={cy}, r={r}) must have r > 0 and lie strictly inside (0, 1)^2")
        for j in range(k):
            dx, dy, rj = out[j][0] - cx, out[j][1] - cy, out[j][2]
            if math.hypot(dx, dy) <= r + rj:
                raise ConfigError(f"holes {j} and {k} overlap or touch; move them apart or shrink them")
    return out


def domain_options(name: str, **options: Any) -> dict[str, Any]:
    """Check ``name`` and its options; return the full options with defaults filled in."""
    allowed: dict[str, dict[str, Any]] = {
        "square": {},
        "l_shape": {"corner": 0.5},
        "perforated": {"holes": DEFAULT_HOLES},
        "disk": {},
    }
    if name not in allowed:
        raise ConfigError(f"unknown domain {name!r}; available: {list(DOMAINS)}")
    unknown = sorted(set(options) - set(allowed[name]))
    if unknown:
        raise ConfigError(f"domain {name!r} takes no option(s) {unknown}; allowed: {sorted(allowed[name]) or 'none'}")
    full = {**allowed[name], **{k: v for k, v in options.items() if v is not None}}
    if name == "l_shape":
        c = float(full["corner"])
        if not 0 < c < 1:
            raise ConfigError(f"l_shape corner must lie in (0, 1), got {c}")
        full["corner"] = c
    if name == "perforated":
        full["holes"] = _normalise_holes(full["holes"])
    return full


def exact_area(name: str, **options: Any) -> float:
    """The area of the exact (not meshed) domain."""
    opts = domain_options(name, **options)
    if name == "square":
        return 1.0
    if name == "l_shape":
        return 1.0 - (1.0 - opts["corner"]) ** 2
    if name == "perforated":
        return 1.0 - sum(math.pi * r * r for _, _, r in opts["holes"])
    return math.pi / 4


def check_domain(name: str, mesh_size: float, **options: Any) -> dict[str, Any]:
    """Check a domain, its options and a mesh size without meshing; return the full options."""
    opts = domain_options(name, **options)
    _check_mesh_size(name, mesh_size, opts)
    return opts


def _check_mesh_size(name: str, mesh_size: float, opts: dict[str, Any]) -> None:
    if not (isinstance(mesh_size, int | float) and 0 < mesh_size <= 0.5):
        raise ConfigError(f"mesh_size must be in (0, 0.5], got {mesh_size!r}")
    if mesh_size < 1e-3:
        raise ConfigError(f"mesh_size {mesh_size} gives more than ~10^6 triangles; use mesh_size >= 1e-3")
    if name == "perforated":
        rmin = min(r for _, _, r in opts["holes"])
        if mesh_size > rmin:
            raise ConfigError(
                f"mesh_size {mesh_size} exceeds the smallest hole radius {rmin}: the holes would be polygons "
                "of fewer than 7 sides; use mesh_size <= the smallest radius"
            )
    if name == "l_shape":
        c = opts["corner"]
        if mesh_size > min(c, 1 - c):
            raise ConfigError(f"mesh_size {mesh_size} exceeds the L-shape's narrowest arm {min(c, 1 - c)}")


def _build_geometry(gmsh: Any, name: str, opts: dict[str, Any]) -> None:
    occ = gmsh.model.occ
    if name == "disk":
        occ.addDisk(0.5, 0.5, 0.0, 0.5, 0.5)
    else:
        square = occ.addRectangle(0.0, 0.0, 0.0, 1.0, 1.0)
        if name == "l_shape":
            c = opts["corner"]
            notch = occ.addRectangle(c, c, 0.0, 1.0 - c, 1.0 - c)
            occ.cut([(2, square)], [(2, notch)])
        elif name == "perforated":
            disks = [(2, occ.addDisk(cx, cy, 0.0, r, r)) for cx, cy, r in opts["holes"]]
            occ.cut([(2, square)], disks)
    occ.synchronize()
    surfaces = [t for _, t in gmsh.model.getEntities(2)]
    curves = sorted({abs(t) for _, t in gmsh.model.getBoundary([(2, s) for s in surfaces], oriented=False)})
    gmsh.model.addPhysicalGroup(2, surfaces, DOMAIN_TAG, name="domain")
    gmsh.model.addPhysicalGroup(1, curves, BOUNDARY_TAG, name="boundary")


def generate_mesh(name: str, path: str | os.PathLike, *, mesh_size: float, **options: Any) -> Path:
    """Mesh domain ``name`` (see the module doc) with target size ``mesh_size`` into ``path`` (.msh).

    Options: ``l_shape``: ``corner`` (default 0.5); ``perforated``: ``holes`` (default
    :data:`DEFAULT_HOLES`). The file appears under its final name only when complete.
    """
    opts = check_domain(name, mesh_size, **options)
    with atomic_msh(path) as tmp, gmsh_session(name) as gmsh:
        gmsh.option.setNumber("Mesh.MeshSizeMax", float(mesh_size))
        _build_geometry(gmsh, name, opts)
        gmsh.model.mesh.generate(2)
        gmsh.model.mesh.renumberNodes()
        gmsh.model.mesh.renumberElements()
        check_mesh(_stats(gmsh), name, mesh_size, **opts)
        gmsh.write(str(tmp))
    return Path(path)


@dataclass(frozen=True)
class MeshStats:
    """Counts and quality of the triangles of a mesh's 2-D physical groups."""

    #: nodes used by the triangles (the rows of a dataset's ``node`` dimension)
    nodes: int
    triangles: int
    area: float
    #: smallest interior angle in degrees, and the signed area of the worst triangle
    min_angle_deg: float
    min_signed_area: float
    #: longest and shortest edge
    max_edge: float
    min_edge: float


def _stats(gmsh: Any) -> MeshStats:
    """:class:`MeshStats` of the current gmsh model (its 2-D physical groups' linear triangles)."""
    import numpy as np

    tags, coords, _ = gmsh.model.mesh.getNodes()
    xy = np.zeros((int(tags.max(initial=0)) + 1, 2))
    xy[tags.astype(np.int64)] = coords.reshape(-1, 3)[:, :2]
    conn = []
    for dim, group in gmsh.model.getPhysicalGroups(2):
        for entity in gmsh.model.getEntitiesForPhysicalGroup(dim, group):
            types, _, nodes = gmsh.model.mesh.getElements(dim, entity)
            for etype, enodes in zip(types, nodes, strict=True):
                if etype != 2:  # 3-node triangle
                    raise ConfigError(f"mesh has 2-D elements of gmsh type {etype}; only linear triangles (type 2) are supported")
                conn.append(np.asarray(enodes, dtype=np.int64).reshape(-1, 3))
    if not conn:
        raise ConfigError("no 2-D physical group with triangles; tag the domain's surfaces in gmsh")
    tri = np.concatenate(conn)
    v = xy[tri]
    e = np.stack([v[:, 1] - v[:, 0], v[:, 2] - v[:, 1], v[:, 0] - v[:, 2]], axis=1)  # (T, 3, 2)
    length = np.linalg.norm(e, axis=-1)
    signed = 0.5 * (e[:, 0, 0] * (-e[:, 2, 1]) - e[:, 0, 1] * (-e[:, 2, 0]))
    # angle at vertex k between the edges leaving it: -e[k-1] and e[k]
    cosines = np.einsum("tkd,tkd->tk", -np.roll(e, 1, axis=1), e) / (np.roll(length, 1, axis=1) * length)
    angles = np.degrees(np.arccos(np.clip(cosines, -1.0, 1.0)))
    return MeshStats(
        nodes=int(np.unique(tri).size),
        triangles=len(tri),
        area=float(np.abs(signed).sum()),
        min_angle_deg=float(angles.min()),
        min_signed_area=float(signed.min()),
        max_edge=float(length.max()),
        min_edge=float(length.min()),
    )


def mesh_stats(path: str | os.PathLike) -> MeshStats:
    """:class:`MeshStats` of a ``.msh`` file (read with gmsh; no dolfinx)."""
    with open_msh(path) as gmsh:
        try:
            return _stats(gmsh)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None


def check_mesh(stats: MeshStats, name: str, mesh_size: float, **options: Any) -> None:
    """Raise :class:`ConfigError` naming ``mesh_size`` if a mesh of domain ``name`` is not valid
    (the module doc's rules: orientation, angles, edge lengths, area)."""
    opts = domain_options(name, **options)
    h = float(mesh_size)
    n_circles = {"perforated": len(opts.get("holes", ())), "disk": 1}.get(name, 0)
    area_tol = 1e-10 + 1.5 * n_circles * math.pi * h * h / 6
    problems = []
    if stats.min_signed_area <= 0:
        problems.append(f"a triangle is inverted or degenerate (signed area {stats.min_signed_area:.3g})")
    if stats.min_angle_deg < MIN_ANGLE_DEG:
        problems.append(f"smallest angle {stats.min_angle_deg:.1f} degrees < {MIN_ANGLE_DEG}")
    if stats.max_edge > 1.5 * h:
        problems.append(f"longest edge {stats.max_edge:.3g} > 1.5 mesh_size")
    if abs(stats.area - exact_area(name, **opts)) > area_tol:
        problems.append(f"area {stats.area:.6f} differs from the exact {exact_area(name, **opts):.6f} by more than {area_tol:.2g}")
    if problems:
        raise ConfigError(f"domain {name!r} meshed with mesh_size {h:g} is not a valid mesh: {'; '.join(problems)}; choose another mesh_size")


@contextlib.contextmanager
def atomic_msh(path: str | os.PathLike) -> Iterator[Path]:
    """Yield the temporary ``.msh`` path for gmsh to write; renamed to ``path`` when complete.

    gmsh picks the format from the suffix, so ``path`` must end in ``.msh`` (checked first).
    """
    if Path(path).suffix != ".msh":
        raise ConfigError(f"mesh path {str(path)!r} must end in .msh")
    with atomic_path(path) as tmp:
        yield tmp


def default_cache_dir() -> Path:
    """``$OPFLOW_MESH_CACHE`` when set, else ``~/.cache/opflow/meshes``."""
    env = os.environ.get("OPFLOW_MESH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "opflow" / "meshes"


def cached_mesh(name: str, *, mesh_size: float, cache_dir: str | os.PathLike | None = None, **options: Any) -> Path:
    """The .msh file of domain ``name``: generated once per (parameters, gmsh version) and reused.

    The file name carries a hash of the domain name, its full options, the mesh size, the gmsh
    version and the geometry code version, so a change of any of them gives a new file.
    """
    import gmsh

    opts = check_domain(name, mesh_size, **options)
    key = json.dumps(
        {"name": name, "mesh_size": float(mesh_size), "options": opts, "gmsh": gmsh.__version__, "v": _GEOMETRY_VERSION},
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    path = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = path / f"{name}-h{float(mesh_size):g}-{digest}.msh"
    if not path.exists():
        generate_mesh(name, path, mesh_size=mesh_size, **opts)
    return path
