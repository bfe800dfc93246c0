"""Where Ray keeps a run's checkpoints and results: a local path or a URI.

A multi-node cluster needs a location every node sees: a shared path (NFS) or
a bucket URI (`s3://...`, `gs://...`). Locations are kept as strings, because
`pathlib` folds the `//` of a URI; checkpoint.py reads them back through
pyarrow's filesystems, which Ray itself uses for its storage.
"""

from pathlib import Path


def resolve(location: str) -> str:
    """A URI as given; a path made absolute (Ray wants absolute paths)."""
    return location if "://" in location else str(Path(location).resolve())


def join(location: str, *names: str) -> str:
    return "/".join([location.rstrip("/"), *names])
