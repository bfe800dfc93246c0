"""Where Ray keeps a run's checkpoints and results: a local path or a URI,
and the checks that it can be used before any trial starts.

A multi-node cluster needs a location every node sees: a shared path (NFS) or
a bucket URI (`s3://...`, `gs://...`), whose query may name an S3-compatible
store (`s3://bucket/path?endpoint_override=host:9000&scheme=http`). Locations
are kept as strings, because `pathlib` folds the `//` of a URI; checkpoint.py
reads them back through pyarrow's filesystems, which Ray itself uses for its
storage (`pyarrow.fs.FileSystem.from_uri`, which reads the query).
"""

import contextlib
import os
import secrets
import shutil
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from orchestrator.driver.node_tasks import on_each_node
from orchestrator.errors import UserError, first_line

# A reachability probe's limits: a store that does not answer is refused in
# seconds, where pyarrow's defaults (the AWS SDK's retries) take minutes.
PROBE_CONNECT_TIMEOUT_S = 3.0
PROBE_REQUEST_TIMEOUT_S = 10.0
PROBE_ATTEMPTS = 2
# How long every node's marker read may take: a task per node, started at once.
NODE_CHECK_TIMEOUT_S = 120.0
MARKER_PREFIX = ".orchestrator-storage-check-"
READS_BUT_CANNOT_WRITE = "reads it but cannot write there"
SHARED_HINT = ("give a shared path that every node mounts (NFS) or a bucket URI "
               "(s3://bucket/path, gs://bucket/path)")


def resolve(location: str) -> str:
    """A URI as given; a path made absolute (Ray wants absolute paths)."""
    return location if is_uri(location) else str(Path(location).resolve())


def join(location: str, *names: str) -> str:
    """`location` with `names` appended to its path; a URI keeps its query last."""
    path, mark, query = location.partition("?") if is_uri(location) else (location, "", "")
    return "/".join([path.rstrip("/"), *names]) + mark + query


def is_uri(location: str) -> bool:
    return "://" in location


def local_path(location: str) -> Path | None:
    """The folder of a location on this machine's filesystem (a path, or a
    `file://` URI); None for a store reached over the network (a bucket)."""
    if not is_uri(location):
        return Path(location)
    parts = urlsplit(location)
    # pyarrow, which Ray stores through, decodes the URI's escapes (%20 is a space).
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def endpoint(uri: str) -> str:
    """Who serves a URI: its query's `endpoint_override`, else the scheme's
    own service (`s3` is AWS), as a person would name it in an error."""
    parts = urlsplit(uri)
    override = parse_qs(parts.query).get("endpoint_override")
    if override:
        scheme = parse_qs(parts.query).get("scheme", ["https"])[0]
        return f"{scheme}://{override[0]}"
    return f"the {parts.scheme} service"


def require_usable(location: str, flag: str = "--storage") -> None:
    """A URI that pyarrow, which Ray stores through, can open, and for a bucket
    one that exists and answers (`require_reachable`); a plain path passes.

    A URI allows neither a space nor a backslash in its path, which a local
    folder's name may hold: pyarrow refuses such a `file://` URI where Ray
    would meet it, inside the first run; the plain path works.
    """
    if not is_uri(location):
        return
    if local_path(location) is None:
        require_reachable(location, flag)  # opens it first
    else:
        _open(location, flag)


def _open(uri: str, flag: str):
    """pyarrow's filesystem and path for `uri`, or one line saying why not."""
    import pyarrow.fs

    try:
        return pyarrow.fs.FileSystem.from_uri(uri)
    except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
        folder = local_path(uri)
        hint = f"; give the folder as a plain path ({flag} {folder})" if folder else ""
        raise UserError(f"{flag} {uri}: not a storage URI pyarrow can open "
                        f"({_one_line(error)}){hint}") from None


def require_reachable(uri: str, flag: str = "--storage") -> None:
    """The bucket of `uri` exists and answers, asked within seconds; read only.

    Ray itself would meet an unreachable store inside the first trial, after
    the AWS SDK's retries; a bucket that does not exist, at its first upload.
    """
    import pyarrow.fs

    filesystem, path = _open(uri, flag)
    filesystem = _with_short_timeouts(filesystem)
    bucket = path.split("/", 1)[0]
    try:
        found, _ = filesystem.get_file_info([bucket, path])
    except OSError as error:
        raise UserError(f"{flag} {uri}: the store at {endpoint(uri)} cannot be reached or "
                        f"refuses us ({_one_line(error)})") from None
    if found.type == pyarrow.fs.FileType.NotFound:
        raise UserError(f"{flag} {uri}: the bucket {bucket!r} does not exist at "
                        f"{endpoint(uri)}; create it first")


def exists(location: str) -> bool:
    """Whether a file or folder is at `location`, on this machine or in a bucket; a
    store that does not answer in seconds reads as holding it."""
    folder = local_path(location)
    if folder is not None:
        return folder.exists()
    import pyarrow.fs

    filesystem, path = _open(location, "--storage")
    try:
        found = _with_short_timeouts(filesystem).get_file_info(path)
    except OSError:
        return True
    return found.type != pyarrow.fs.FileType.NotFound


def remove_tree(location: str) -> None:
    """Remove the folder `location` and everything in it, on this machine or in a
    bucket (through pyarrow, as Ray stores); absent, or not removable, it is left."""
    folder = local_path(location)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    filesystem, path = _open(location, "--storage")
    with contextlib.suppress(OSError):  # absent, or the store does not answer in seconds
        _with_short_timeouts(filesystem).delete_dir(path)


def _with_short_timeouts(filesystem):
    """The same filesystem (pyarrow's own reading of the URI, options included),
    with a probe's timeouts and retries."""
    import pyarrow.fs

    if isinstance(filesystem, pyarrow.fs.S3FileSystem):
        _, (options,) = filesystem.__reduce__()
        return pyarrow.fs.S3FileSystem(**{
            **options, "connect_timeout": PROBE_CONNECT_TIMEOUT_S,
            "request_timeout": PROBE_REQUEST_TIMEOUT_S,
            "retry_strategy": pyarrow.fs.AwsStandardS3RetryStrategy(max_attempts=PROBE_ATTEMPTS)})
    if isinstance(filesystem, pyarrow.fs.GcsFileSystem):
        import datetime
        _, (options,) = filesystem.__reduce__()
        return pyarrow.fs.GcsFileSystem(**{
            **options, "retry_time_limit": datetime.timedelta(seconds=PROBE_REQUEST_TIMEOUT_S)})
    return filesystem


def require_seen_by_every_node(location: str) -> None:
    """A local `location` must be one folder for every node of the cluster
    this process is connected to, and one each node can write to: the driver
    writes a marker there, and a task on each alive node reads it back and
    writes a file of its own beside it. Nothing is left: the files go, and so
    do the folders made for them.

    Without this, a node that does not share the path fails inside a trial
    (its checkpoint lands on its own disk, or Ray cannot find it again), and
    one that cannot write there (NFS read-only, or root squashed to a user who
    may not write in the driver's folder) fails at its first checkpoint.
    """
    import ray

    nodes = [node for node in ray.nodes() if node["Alive"]]
    folder = local_path(location)
    if len(nodes) < 2 or folder is None:
        return
    made = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    token = secrets.token_hex(16)
    marker = folder / f"{MARKER_PREFIX}{token}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        marker.write_text(token)
        answers = on_each_node(node_check(), nodes, NODE_CHECK_TIMEOUT_S,
                               lambda node: (str(marker), token, node["NodeID"]))
        for answer in answers:
            node = answer.node
            if not answer.answered:
                seen = f"did not answer within {NODE_CHECK_TIMEOUT_S:g} s"
            elif answer.error is not None:
                seen = (f"cannot read a file the driver wrote there (its task failed: "
                        f"{_one_line(answer.error)})")
            elif not (seen := answer.value):
                continue
            usable = "writable by" if seen.startswith(READS_BUT_CANNOT_WRITE) else "seen by"
            raise UserError(
                f"storage {location} is not {usable} every node: node {node['NodeID']} at "
                f"{node['NodeManagerAddress']} {seen}; {SHARED_HINT} with --storage")
    finally:
        marker.unlink(missing_ok=True)
        for parent in made:  # innermost first; one a node left a file in stays
            with contextlib.suppress(OSError):
                os.rmdir(parent)


def node_check():
    """A node's part of `require_seen_by_every_node`, made here so that Ray ships
    it by value (a node runs it without this package): "" where the node reads the
    driver's marker at `path` (its text `token`) and can write a file beside it,
    else what it could not do."""
    def check(path: str, token: str, node_id: str) -> str:
        try:
            with open(path) as file:
                text = file.read()
        except OSError as error:
            return f"cannot read a file the driver wrote there ({error.strerror or error})"
        if text != token:
            return f"cannot read a file the driver wrote there (it reads {text[:60]!r})"
        written = f"{path}.{node_id[:16]}"
        try:
            with open(written, "w") as file:
                file.write(token)
        except OSError as error:
            return (f"{READS_BUT_CANNOT_WRITE} ({error.strerror or error}): its workers' "
                    f"checkpoints could not be saved")
        finally:
            with contextlib.suppress(OSError):
                os.remove(written)
        return ""
    return check


def _one_line(error: BaseException) -> str:
    return first_line(error)[:300]
