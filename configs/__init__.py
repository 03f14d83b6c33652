"""The presets `voxnerf train` picks from (`voxnerf.train.session.preset_for`), shipped as package data: installed as
`voxnerf.configs`, found through `importlib.resources` wherever the package is installed."""
