"""The answer sheet (sheet.py): one module an exercise, exercise_13_5_1.py to
exercise_13_6_3.py, with learning_rates.py and linear_rule.py for 13.5.2's lr
search, root_funnel.py for 13.5.3's root against sharded, and any_model.py for a
model not the book's; what they share: the noise
of repeated work (noise.py; time_spread.py for times, and the sides of a
comparison in sides.py), a configuration's cell of replicas (cells.py),
comparisons beyond the noise (compare.py, welch.py) and the wording."""
