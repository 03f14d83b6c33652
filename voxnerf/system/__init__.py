"""Where and how torch runs: the device and autocast precision a command asks for, the CPU threads it takes,
the process's allocator settings and float flags, and the progress every long step shows (a bar, or log lines
with an ETA).

Imports nothing of voxnerf but `voxnerf.errors`: every stage may use it.
"""
