"""Where and how torch runs: the device and autocast precision a command asks for, the CPU threads it takes,
and the process's allocator settings.

Imports nothing of voxnerf but `voxnerf.errors`: every stage may use it.
"""
