"""What a user can ask for: every option declared once (options.py), the command
line generated from it (cli.py), presets and studies. No torch, no Ray: bad
input is refused here in about a second, before anything heavy is imported."""
