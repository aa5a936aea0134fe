"""Looking inside a model: traces, plots, summaries, runtime checks and the explorer page."""
