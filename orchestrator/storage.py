"""Where Ray keeps a run's checkpoints and results: a local path or a URI.

A multi-node cluster needs a location every node sees: a shared path (NFS) or
a bucket URI (`s3://...`, `gs://...`). Locations are kept as strings, because
`pathlib` folds the `//` of a URI, and read through pyarrow's filesystems,
which Ray itself uses for its storage.
"""

from pathlib import Path

import pyarrow.fs


def resolve(location: str) -> str:
    """A URI as given; a path made absolute (Ray wants absolute paths)."""
    return location if "://" in location else str(Path(location).resolve())


def join(location: str, *names: str) -> str:
    return "/".join([location.rstrip("/"), *names])


def read_newest_text(folder: str, prefix: str, file_name: str) -> str | None:
    """`file_name` in the newest readable subfolder of `folder` named `prefix*`.

    Subfolders are ordered by name (Ray names checkpoints by time); a file
    that cannot be read, say half copied when its writer died, is passed
    over for the next newest.
    """
    filesystem, root = pyarrow.fs.FileSystem.from_uri(folder)
    entries = filesystem.get_file_info(pyarrow.fs.FileSelector(root, allow_not_found=True))
    names = sorted((entry.base_name for entry in entries
                    if entry.type == pyarrow.fs.FileType.Directory
                    and entry.base_name.startswith(prefix)), reverse=True)
    for name in names:
        try:
            with filesystem.open_input_stream(f"{root}/{name}/{file_name}") as stream:
                return stream.read().decode()
        except (OSError, UnicodeDecodeError):
            continue
    return None
