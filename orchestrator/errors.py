"""The one exception type for mistakes the user can fix.

The command-line entry points print a `UserError` as a single line and exit
with status 2; anything else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """Bad input: a config value, a data file, a cluster address."""
