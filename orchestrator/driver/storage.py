"""Where Ray keeps a run's checkpoints and results: a local path or a URI.

A multi-node cluster needs a location every node sees: a shared path (NFS) or
a bucket URI (`s3://...`, `gs://...`), whose query may name an S3-compatible
store (`s3://bucket/path?endpoint_override=host:9000&scheme=http`). Locations
are kept as strings, because `pathlib` folds the `//` of a URI; checkpoint.py
reads them back through pyarrow's filesystems, which Ray itself uses for its
storage.
"""

from pathlib import Path


def resolve(location: str) -> str:
    """A URI as given; a path made absolute (Ray wants absolute paths)."""
    return location if is_uri(location) else str(Path(location).resolve())


def join(location: str, *names: str) -> str:
    """`location` with `names` appended to its path; a URI keeps its query last."""
    path, mark, query = location.partition("?") if is_uri(location) else (location, "", "")
    return "/".join([path.rstrip("/"), *names]) + mark + query


def is_uri(location: str) -> bool:
    return "://" in location
