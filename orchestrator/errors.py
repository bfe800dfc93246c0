"""The one exception type for mistakes the user can fix.

The command-line entry points print a `UserError` as a single line and exit
with status 2; anything else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """Bad input: a config value, a data file, a cluster address."""


def first_line(error: BaseException) -> str:
    """An error's first line that is not blank (for a one-line refusal or record:
    CUDA's and the S3 clients' errors add lines of advice), or its type's name."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def named_first_line(error: BaseException) -> str:
    """"ValueError: its first line", or "ValueError" for an error without words."""
    line, name = first_line(error), type(error).__name__
    return name if line == name else f"{name}: {line}"
