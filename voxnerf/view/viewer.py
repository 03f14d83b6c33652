"""A web viewer (viser) of a run or of a training in progress: the field rendered from the browser's camera, the
training cameras, the occupancy, training progress, and keyframes saved as a camera path.

The viser scene is the run's world frame (the frame of its training cameras), so a browser camera is a world
camera as it is. Rendering goes through `Run.render_view` and happens in one thread only (the caller of
`Viewer.render_due`: the serving loop, or the training loop between steps); viser's own threads only note camera
moves and button presses.

Progressive resolution: while a camera moves, each frame is rendered with its longest side at `SIDES[0]` pixels;
once it has stood still for `STILL_SECONDS`, the same view is rendered again at each larger side up to the
viewer's maximum (and the browser canvas).
"""

from __future__ import annotations

import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
import viser
import viser.transforms as vtf
from scipy.spatial import cKDTree

from voxnerf.data.cameras import Cameras, focal_from_fov
from voxnerf.data.images import to_uint8
from voxnerf.data.rays import image_rays
from voxnerf.data.scene import Scene
from voxnerf.export.depth import SURFACE_OPACITY, z_depth
from voxnerf.render.views import View, target_image
from voxnerf.run.load import Run
from voxnerf.view.keyframes import Keyframe, interpolate, write_camera_path
from voxnerf.view.occupancy import colormap, grid_to_unit, occupied_cells
from voxnerf.view.paths import orbit_shape

if TYPE_CHECKING:
    from voxnerf.train.trainer import Trainer

SIDES = (64, 128, 256, 512, 1024)  # longest image side of the successive renders of one view, pixels
STILL_SECONDS = 0.2  # a camera that has not moved for this long is refined
MAX_POINTS = 200_000  # occupied cells shown at most (a random subset beyond)
THUMBNAIL_SIDE = 64  # training camera thumbnails, longest side in pixels
FRUSTUM_SCALE = 0.08  # keyframe frustum size as a fraction of the first keyframe's distance to the scene center
FRUSTUM_DEPTH_PER_MEDIAN_DISTANCE = 0.05  # training frusta's depth: this fraction of the cameras' median distance
#                                          to the center,
FRUSTUM_SPACING = 0.5  # but at most this fraction of the median distance between neighbouring cameras
LINE_PIXELS = 1.0  # frustum and path line width
START_FILL = 0.8  # browsers start where the scene box's inscribed sphere spans this fraction of the view height,
START_NEAREST = 0.1  # and at least this fraction of the cameras' mean distance from the scene center
FAR_DEPTH = 160.0  # depth sent for background pixels: behind everything (viser's depth images reach 167.77)
PATH_FRAMES_SHOWN = 100  # samples of the camera path drawn in the scene
KEYFRAME_COLOR = (230, 120, 20)
CAMERA_COLOR = (60, 60, 60)
# a frustum as viser draws it, in units of its half width, half height and depth (camera frame, OpenCV): the apex,
# the four image-plane corners and the tip of the up marker
FRUSTUM_HULL = np.array([[0, 0, 0], [-1, -1, 1], [1, -1, 1], [1, 1, 1], [-1, 1, 1], [0, -1.2, 1]], np.float64)


@dataclass
class ClientView:
    """What one browser has been shown: `moved` since the last frame, when it last moved, the SIDES index of its
    last frame (-1: none yet), and the field version that frame showed."""

    moved: bool = True
    moved_at: float = 0.0
    level: int = -1
    version: int = -1


def browser_camera(camera: viser.CameraHandle, side: int) -> Cameras:
    """The browser's current view as one pinhole camera whose longest image side is `side` pixels.

    viser reports the camera-to-world rotation (wxyz) and position in OpenCV convention, as voxnerf keeps its
    cameras, and the vertical field of view in radians.
    """
    aspect = camera.aspect
    width, height = (side, max(1, round(side / aspect))) if aspect >= 1 else (max(1, round(side * aspect)), side)
    fy = focal_from_fov(camera.fov, height)
    return Cameras(camera_pose(camera)[None], [[fy, fy, width / 2, height / 2]], [[width, height]], np.zeros((1, 4)))


def camera_pose(camera: viser.CameraHandle) -> np.ndarray:
    """(3, 4) camera-to-world matrix (OpenCV convention) of a browser camera."""
    return np.concatenate([vtf.SO3(camera.wxyz).as_matrix(), np.asarray(camera.position)[:, None]], 1)


def viser_depth(view: View, camera: Cameras) -> np.ndarray:
    """(H, W) float32 distance along the viewing axis (`z_depth`) of the surface each pixel of a one-camera `view`
    sees, FAR_DEPTH where its ray sees mostly background (SURFACE_OPACITY): what viser composites the scene with."""
    _, dirs = image_rays(camera, 0, torch.float64)
    z = z_depth(view.depth.reshape(-1), dirs.numpy(), camera.c2w[0]).reshape(view.depth.shape)
    return np.where(view.opacity > SURFACE_OPACITY, z, FAR_DEPTH).astype(np.float32)


def frustum_depth(cameras: Cameras, center: np.ndarray) -> float:
    """Depth (world units) of the drawn training frusta: FRUSTUM_DEPTH_PER_MEDIAN_DISTANCE of the cameras' median
    distance to `center` (3,), at most FRUSTUM_SPACING of the median distance from a camera to its nearest
    neighbour."""
    distance = np.median(np.linalg.norm(cameras.centers - center, axis=1))
    spacing = np.median(cKDTree(cameras.centers).query(cameras.centers, k=2)[0][:, 1])  # inf for one camera
    return float(min(FRUSTUM_DEPTH_PER_MEDIAN_DISTANCE * distance, FRUSTUM_SPACING * spacing))


def frustum_tangents(cameras: Cameras) -> np.ndarray:
    """(N, 2) half width and half height of each camera's frustum per unit depth (vertical field of view and
    image aspect, as viser draws them)."""
    y = np.tan(0.5 * cameras.vertical_fov())
    return np.stack([y * cameras.sizes[:, 0] / cameras.sizes[:, 1], y], 1)


def viser_scale(cameras: Cameras, depth: float) -> np.ndarray:
    """(N,) the `scale` that makes viser draw each camera's frustum `depth` deep (viser sizes a frustum so that
    its half width x half height x depth is 3 scale^3)."""
    x, y = frustum_tangents(cameras).T
    return depth * np.cbrt(x * y / 3)


def frustum_points(cameras: Cameras, depth: float) -> np.ndarray:
    """(N, 6, 3) world points whose convex hull holds each camera's frustum as viser draws it `depth` deep (see
    FRUSTUM_HULL)."""
    extent = depth * np.concatenate([frustum_tangents(cameras), np.ones((len(cameras), 1))], 1)
    return np.einsum("nij,nkj->nki", cameras.c2w[:, :, :3], FRUSTUM_HULL * extent[:, None]) + cameras.centers[:, None]


def clearance(cameras: Cameras, center: np.ndarray) -> float:
    """Radius of the ball around `center` (3,) that no drawn training frustum (`frustum_depth` deep) enters: the
    least over cameras of the camera's distance to `center` minus its frustum's reach from its apex."""
    points = frustum_points(cameras, frustum_depth(cameras, center))
    reach = np.linalg.norm(points - cameras.centers[:, None], axis=-1).max(1)
    return float((np.linalg.norm(cameras.centers - center, axis=1) - reach).min())


def start_position(cameras: Cameras, bbox: np.ndarray) -> np.ndarray:
    """(3,) where browsers start, looking at the center of the scene box `bbox` (2, 3) with the first camera's
    vertical field of view, from the side of the training camera of median elevation.

    The distance is the one at which the box's inscribed sphere spans START_FILL of the view's height, or less,
    `clearance`, so that every training frustum lies farther from the center than the start camera: then none
    shows in the view nearer than the center (for diagonal half fields of view up to 45 degrees). It is at least
    START_NEAREST of the cameras' mean distance from the center (for a camera at the center itself).
    """
    center = bbox.mean(0)
    _, mean_distance, elevation = orbit_shape(cameras, center)
    offset = cameras.centers[np.argsort(elevation)[len(elevation) // 2]] - center
    fill = 0.5 * np.ptp(bbox, axis=0).min() / np.sin(0.5 * START_FILL * cameras.vertical_fov()[0])
    distance = max(min(fill, clearance(cameras, center)), START_NEAREST * mean_distance)
    return center + distance * offset / np.linalg.norm(offset)


def occupied_points(run: Run, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """World centers (K, 3) of the estimator's occupied cells (at most MAX_POINTS, a random subset beyond) and
    their colors (K, 3) uint8, the opacity score through viridis."""
    cells, score = occupied_cells(run)
    if len(cells) > MAX_POINTS:
        keep = rng.choice(len(cells), MAX_POINTS, replace=False)
        cells, score = cells[keep], score[keep]
    centers = run.to_world(grid_to_unit(run, (cells + 0.5) * run.model.estimator.cell_size - 1))
    return centers.astype(np.float32), to_uint8(colormap(score))


def thumbnails(scene: Scene, indices: np.ndarray) -> list[np.ndarray]:
    """uint8 (h, w, 3) images of `indices`, every k-th pixel so that the longest side is near THUMBNAIL_SIDE,
    composited on the scene's rendering background."""
    out = []
    for i in indices:
        image = scene.rgba(int(i))
        k = max(1, max(image.shape[:2]) // THUMBNAIL_SIDE)
        out.append(to_uint8(target_image(image[::k, ::k], scene.render_background)))
    return out


class Viewer:
    """A viser server showing a run; call `render_due` often (from one thread) to keep the browsers' views fresh.

    Args:
        run: the run (a loaded run, or a trainer's `as_run`): its model renders, its folder holds camera paths.
        cameras: its training cameras (world), drawn as frusta; None draws none.
        images: uint8 thumbnails (h, w, 3) of those cameras, shown in the frusta while 'camera images' is ticked
            (off at first), or None (no such box).
        host, port: where to serve (port 0: any free port; a taken port: the next free one).
        max_side: the largest image side rendered, pixels.
        say: where notes go (the URL, saved camera paths).
    """

    def __init__(self, run: Run, cameras: Cameras | None, images: list[np.ndarray] | None = None,
                 host: str = "127.0.0.1", port: int = 8080, max_side: int = 256,
                 say: Callable[[str], None] = print):
        self.run, self.cameras, self.say = run, cameras, say
        self.sides = [s for s in SIDES if s < max_side] + [max_side]
        self.version = 0
        self.views: dict[int, ClientView] = {}
        self.keyframes: list[Keyframe] = []
        self.lock = threading.Lock()
        self.rng = np.random.default_rng(0)
        self.server = viser.ViserServer(host=host, port=port, label="voxnerf", verbose=False)
        self.server.scene.set_up_direction(cameras.up if cameras is not None else (0.0, 0.0, 1.0))
        self._place_camera(self.server.initial_camera)
        self.server.on_client_connect(self._connect)
        self.server.on_client_disconnect(lambda client: self.views.pop(client.client_id, None))
        self.camera_root = self.server.scene.add_frame("/training_cameras", show_axes=False)
        self.path_root = self.server.scene.add_frame("/keyframes", show_axes=False)
        self._add_controls(images is not None)
        if cameras is not None:
            self._add_training_cameras(cameras, images)
        self.show_occupancy()

    @property
    def url(self) -> str:
        return f"http://{self.server.get_host()}:{self.server.get_port()}"

    def close(self) -> None:
        self.server.stop()

    # ---- scene content ------------------------------------------------------------------------------------
    def _scene_center(self) -> np.ndarray:
        return np.asarray(self.run.record.bbox, np.float64).mean(0)

    def _place_camera(self, camera) -> None:
        """Put a camera (a browser's, or the initial one 'Reset View' returns to) at `start_position`."""
        if self.cameras is None:
            return
        camera.position = start_position(self.cameras, self.run.record.bbox)
        camera.look_at = self._scene_center()
        if isinstance(camera, viser.CameraHandle):
            camera.up_direction = self.cameras.up
        else:
            camera.up = self.cameras.up
        camera.fov = float(self.cameras.vertical_fov()[0])

    def _add_training_cameras(self, cameras: Cameras, images: list[np.ndarray] | None) -> None:
        """One small thin frustum per training camera; clicking one moves the browser there."""
        fovs = cameras.vertical_fov()
        scales = viser_scale(cameras, frustum_depth(cameras, self._scene_center()))
        self.frusta = []
        for i in range(len(cameras)):
            frustum = self.server.scene.add_camera_frustum(
                f"/training_cameras/{i}", float(fovs[i]), float(cameras.sizes[i, 0] / cameras.sizes[i, 1]),
                scale=float(scales[i]), thickness=LINE_PIXELS, thickness_units="screen", color=CAMERA_COLOR,
                format="jpeg", wxyz=vtf.SO3.from_matrix(cameras.c2w[i, :, :3]).wxyz, position=cameras.centers[i])
            frustum.on_click(lambda event, i=i: self._go_to(event.client, cameras, i))
            self.frusta.append(frustum)
        if images is not None:
            self.images_box.on_update(lambda _: self._show_images(images))

    def _show_images(self, images: list[np.ndarray]) -> None:
        """Each training camera's thumbnail in its frustum while 'camera images' is ticked, none otherwise."""
        for frustum, image in zip(self.frusta, images):
            frustum.image = image if self.images_box.value else None

    @staticmethod
    def _go_to(client: viser.ClientHandle, cameras: Cameras, index: int) -> None:
        with client.atomic():
            client.camera.wxyz = vtf.SO3.from_matrix(cameras.c2w[index, :, :3]).wxyz
            client.camera.position = cameras.centers[index]
            client.camera.fov = float(cameras.vertical_fov()[index])

    def show_occupancy(self) -> None:
        """(Re)draw the occupied cells as a point cloud, hidden unless the 'occupancy' box is ticked."""
        points, colors = occupied_points(self.run, self.rng)
        size = float(np.ptp(self.run.record.bbox, axis=0).max()) / self.run.model.estimator.resolution
        self.points = self.server.scene.add_point_cloud("/occupancy", points, colors, point_size=size,
                                                        visible=self.occupancy_box.value)

    # ---- controls -----------------------------------------------------------------------------------------
    def _add_controls(self, with_images: bool) -> None:
        gui = self.server.gui
        self.progress = gui.add_markdown("", visible=False)
        self.cameras_box = gui.add_checkbox("training cameras", True)
        if with_images:
            self.images_box = gui.add_checkbox("camera images", False, hint="each training camera's image in its "
                                                                           "frustum")
        self.occupancy_box = gui.add_checkbox("occupancy", False, hint="centers of the estimator's occupied cells")
        self.cameras_box.on_update(lambda _: setattr(self.camera_root, "visible", self.cameras_box.value))
        self.occupancy_box.on_update(lambda _: setattr(self.points, "visible", self.occupancy_box.value))
        width, height = (int(s) for s in self.cameras.sizes[0]) if self.cameras is not None else (800, 800)
        with gui.add_folder("Camera path"):
            self.keyframe_count = gui.add_markdown("no keyframes")
            gui.add_button("Add keyframe", hint="the current view").on_click(
                lambda event: self.add_keyframe(event.client.camera))
            gui.add_button("Remove last keyframe").on_click(lambda _: self._drop_keyframe())
            self.fps = gui.add_number("fps", 24, min=1, max=120, step=1)
            self.seconds = gui.add_number("seconds", 4.0, min=0.1, step=0.1)
            self.width = gui.add_number("width", width, min=16, step=1)
            self.height = gui.add_number("height", height, min=16, step=1)
            self.path_file = gui.add_text("file", "camera_paths/path.json", hint="relative to the run folder")
            gui.add_button("Save camera path").on_click(lambda event: self._save_from(event.client))

    def add_keyframe(self, camera: viser.CameraHandle) -> Keyframe:
        """Append the browser camera's view as a keyframe and redraw the path."""
        keyframe = Keyframe(camera_pose(camera), float(np.degrees(camera.fov)), float(camera.aspect))
        with self.lock:
            self.keyframes.append(keyframe)
        self._draw_path()
        return keyframe

    def _drop_keyframe(self) -> None:
        with self.lock:
            if self.keyframes:
                self.keyframes.pop()
        self._draw_path()

    def _draw_path(self) -> None:
        """The keyframes as orange frusta and the path through them as a line."""
        with self.lock:
            keyframes = list(self.keyframes)
        self.path_root.remove()
        self.path_root = self.server.scene.add_frame("/keyframes", show_axes=False)
        scale = FRUSTUM_SCALE * float(np.linalg.norm(keyframes[0].c2w[:, 3] - self._scene_center())) \
            if keyframes else 1.0
        for i, k in enumerate(keyframes):
            self.server.scene.add_camera_frustum(
                f"/keyframes/{i}", float(np.radians(k.fov)), k.aspect, scale=scale, thickness=LINE_PIXELS,
                thickness_units="screen",
                color=KEYFRAME_COLOR, wxyz=vtf.SO3.from_matrix(k.c2w[:, :3]).wxyz, position=k.c2w[:, 3])
        if len(keyframes) > 1:
            points = np.stack([f.c2w[:, 3] for f in interpolate(keyframes, PATH_FRAMES_SHOWN)])
            segments = np.stack([points[:-1], points[1:]], 1)
            self.server.scene.add_line_segments("/keyframes/path", segments, KEYFRAME_COLOR,
                                                thickness=LINE_PIXELS, thickness_units="screen")
        self.keyframe_count.content = f"{len(keyframes)} keyframe{'s' * (len(keyframes) != 1)}"

    def save_camera_path(self) -> Path:
        """Write the path through the keyframes to the 'file' box's path (relative to the run folder)."""
        with self.lock:
            keyframes = list(self.keyframes)
        if not keyframes:
            raise ValueError("no keyframes: add one with 'Add keyframe' first")
        path = Path(self.path_file.value)
        path = path if path.is_absolute() else self.run.path / path
        return write_camera_path(path, keyframes, int(self.width.value), int(self.height.value),
                                 float(self.fps.value), float(self.seconds.value))

    def _save_from(self, client: viser.ClientHandle) -> None:
        try:
            path = self.save_camera_path()
        except (ValueError, OSError) as e:
            client.add_notification("camera path not saved", str(e), color="red", auto_close_seconds=8)
            return
        self.say(f"viewer      camera path {path}")
        client.add_notification("camera path saved", str(path), auto_close_seconds=8)

    def show_progress(self, step: int, stats: dict, rays_per_s: float) -> None:
        """Show a training step's numbers (loss, PSNR from its `stats`, and the measured rays/s)."""
        self.progress.content = (f"**training** step {step} · loss {stats['loss']:.4f} · "
                                 f"PSNR {stats['psnr']:.2f} dB · {rays_per_s / 1e3:.1f}k rays/s")
        self.progress.visible = True

    # ---- rendering ----------------------------------------------------------------------------------------
    def _connect(self, client: viser.ClientHandle) -> None:
        self.views[client.client_id] = ClientView(moved_at=time.monotonic())
        with client.atomic():
            self._place_camera(client.camera)
        client.camera.on_update(lambda camera: self._moved(camera.client.client_id))

    def _moved(self, client_id: int) -> None:
        view = self.views.get(client_id)
        if view is not None:
            view.moved, view.moved_at = True, time.monotonic()

    def field_changed(self) -> None:
        """The field was trained further: every browser's view is rendered again (at its current resolution)."""
        self.version += 1

    def _level_due(self, client: viser.ClientHandle, view: ClientView) -> int | None:
        """The SIDES index the client's next frame is due at, or None when its view is up to date."""
        if view.moved:
            return 0
        top = len(self.sides) - 1
        while top > 0 and self.sides[top - 1] >= max(client.camera.image_width, client.camera.image_height):
            top -= 1
        if view.level < top:
            return view.level + 1 if time.monotonic() - view.moved_at >= STILL_SECONDS else None
        return view.level if view.version < self.version else None

    def render_due(self) -> bool:
        """Render one browser's next due frame (see `_level_due`) and send it; returns whether one was due."""
        for client in list(self.server.get_clients().values()):
            view = self.views.get(client.client_id)
            if view is None or client.camera.image_height == 0:
                continue
            level = self._level_due(client, view)
            if level is None:
                continue
            view.moved, view.version = False, self.version
            camera = browser_camera(client.camera, self.sides[level])
            frame = self.run.render_view(camera, 0)
            with warnings.catch_warnings():  # a browser that closed meanwhile only misses this frame
                warnings.simplefilter("ignore", UserWarning)
                client.scene.set_background_image(to_uint8(frame.rgb), format="jpeg", jpeg_quality=90,
                                                  depth=viser_depth(frame, camera))
            view.level = level
            return True
        return False

    def serve(self, poll: float = 0.01) -> None:
        """Render due frames until Ctrl-C or SIGTERM (call from the main thread)."""
        signal.signal(signal.SIGTERM, _interrupt)  # a clean stop even where SIGINT is ignored (background jobs)
        try:
            while True:
                if not self.render_due():
                    time.sleep(poll)
        except KeyboardInterrupt:
            pass


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


class TrainingViewer:
    """A trainer's `on_step` hook that serves a Viewer of the training (rank 0 only), started at the first step.

    Between steps it shows progress (at most every `PROGRESS_SECONDS`), redraws the occupancy (every
    `OCCUPANCY_SECONDS`), and renders due frames in the training thread, so that the viewer's work takes at most
    `share` of the wall time.
    """

    PROGRESS_SECONDS = 0.5
    OCCUPANCY_SECONDS = 5.0

    def __init__(self, host: str = "127.0.0.1", port: int = 8080, max_side: int = 256, share: float = 0.1,
                 say: Callable[[str], None] = print):
        self.host, self.port, self.max_side, self.share, self.say = host, port, max_side, share, say
        self.viewer: Viewer | None = None
        self.busy_until = self.progress_at = self.occupancy_at = 0.0
        self.rays, self.rays_since = 0, time.perf_counter()

    def start(self, trainer: Trainer) -> Viewer:
        scene = trainer.scene
        indices = scene.split_indices("train")
        viewer = Viewer(trainer.as_run(), scene.cameras.subset(indices), thumbnails(scene, indices), self.host,
                        self.port, self.max_side, self.say)
        self.say(f"viewer      {viewer.url}")
        return viewer

    def __call__(self, trainer: Trainer, stats: dict) -> None:
        if not trainer.world.is_main:
            return
        if self.viewer is None:
            self.viewer = self.start(trainer)
        now = time.perf_counter()
        self.rays += stats["rays"]
        if now >= self.progress_at:  # a logging step's stats are numbers already; others are read here (a sync)
            numbers = stats if "psnr" in stats else trainer.log_row(stats)
            self.viewer.show_progress(trainer.step, numbers, self.rays / max(now - self.rays_since, 1e-9))
            self.rays, self.rays_since, self.progress_at = 0, now, now + self.PROGRESS_SECONDS
        if now < self.busy_until:
            return
        if now >= self.occupancy_at:
            self.viewer.show_occupancy()
            self.occupancy_at = now + self.OCCUPANCY_SECONDS
        self.viewer.field_changed()
        self.viewer.render_due()
        spent = time.perf_counter() - now
        self.busy_until = now + spent / self.share

    def serve_after_training(self, code: int) -> None:
        """Keep serving the trained field until Ctrl-C after a training that ended normally (`code` 0); then stop."""
        if self.viewer is None:
            return
        if code == 0:
            self.say(f"viewer      {self.viewer.url} shows the trained field (Ctrl-C to stop)")
            self.viewer.serve()
        self.viewer.close()
