"""`voxnerf process`: photos or a video in, a posed scene folder out (frames, COLMAP structure from motion,
undistortion).

May import: `voxnerf.errors`, `voxnerf.system`, `voxnerf.data` (it writes a scene the loaders read back).
"""

from voxnerf.process.capture import ProcessReport, process_capture

__all__ = ["ProcessReport", "process_capture"]
