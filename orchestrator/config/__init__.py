"""What a user can ask for: every option of a run declared once (options.py) and
a sweep's axes (grid.py), both command lines generated from them (cli.py),
presets (presets.py) and the exercises' grids (studies.py), a data set's
facts (dataset.py) and `package.module:function` references (references.py).
No torch, no Ray: bad input is refused here in about a second, before
anything heavy is imported."""
