"""Confinement: a task's working directory must resolve (symlinks included) inside an allowed root."""

from pathlib import Path

from django.conf import settings

from jobs.errors import InvalidInput, Refused


def allowed_roots() -> list[Path]:
    return [root.resolve() for root in settings.BRIDGE_ALLOWED_ROOTS]


def is_inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def resolve_cwd(raw: str | None) -> Path:
    """Return the real directory a task may run in, or raise before anything starts."""
    if raw is None or not str(raw).strip():
        candidate = Path(settings.BRIDGE_DEFAULT_CWD)
    else:
        candidate = Path(str(raw).strip()).expanduser()
        if not candidate.is_absolute():
            raise InvalidInput(f"cwd must be an absolute path, got {raw!r}")
    roots = allowed_roots()
    resolved = candidate.resolve()
    if not is_inside(resolved, roots):
        raise Refused(
            f"cwd {str(candidate)!r} resolves to {str(resolved)!r}, outside the allowed roots: "
            + ", ".join(str(r) for r in roots)
            + " (set BRIDGE_ALLOWED_ROOTS to change them)",
            allowed_roots=[str(r) for r in roots],
        )
    if not resolved.exists():
        raise InvalidInput(f"cwd {str(resolved)!r} does not exist")
    if not resolved.is_dir():
        raise InvalidInput(f"cwd {str(resolved)!r} is not a directory")
    return resolved
