"""The whole lakelock pipeline on one machine, on embedded defaults (`python -m demo`)."""
