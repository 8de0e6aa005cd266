"""Reports read only what a run wrote to disk: HTML reports, comparisons, regression checks."""
