"""One module per peer library: its app object and the benchmark job as its task."""
