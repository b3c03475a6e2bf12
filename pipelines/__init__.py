"""DVC stage entry points: each validates params.yaml, runs a flow, writes its outs and metrics."""
