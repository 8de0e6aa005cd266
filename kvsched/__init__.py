"""The application: CLI, experiment runner, sweeps and tune; the only package that imports every other."""
