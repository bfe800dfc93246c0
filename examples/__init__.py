"""Examples of a model and a data set of your own (`--model`, `--dataset`)."""
