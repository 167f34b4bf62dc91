"""The five admission check groups, one module per group (structure has three: wiring, files,
cycles), in the order of the paper's Table 1."""
