"""Structure from motion with pycolmap (COLMAP's library): SIFT features, matching, incremental mapping.

COLMAP may split a capture into several models (groups of images that no match links); the one that registers
the most images is kept. Models voxnerf does not read (fisheye and the other COLMAP camera models beyond
`colmap.PARAM_ORDER`) are undistorted to PINHOLE images by COLMAP's own undistorter.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pycolmap

from voxnerf.data.formats import colmap
from voxnerf.errors import VoxnerfError

MATCHERS = ("exhaustive", "sequential")
# The camera models COLMAP estimates (src/colmap/sensor/models.h); voxnerf reads the first five directly.
CAMERA_MODELS = tuple(name for name, _ in colmap.MODELS.values())


@dataclass
class SfmOptions:
    """How structure from motion runs.

    Attributes:
        camera_model: a COLMAP camera model (CAMERA_MODELS); SIMPLE_RADIAL is COLMAP's default.
        single_camera: one camera (intrinsics) shared by every image, as for a video or one phone's photos.
        matcher: "exhaustive" (every pair; up to a few hundred images) or "sequential" (neighbors in name
            order, for video frames).
        min_inliers: matches the first image pair needs (COLMAP's default 100); other images need 30% of it
            (at least 10). Small images (a few hundred pixels wide) have few features and need fewer.
        threads: CPU threads (-1: all).
        seed: COLMAP's random seed (RANSAC, sampling): one seed and one thread repeat a reconstruction exactly.
    """

    camera_model: str = "SIMPLE_RADIAL"
    single_camera: bool = True
    matcher: str = "exhaustive"
    min_inliers: int = 100
    threads: int = -1
    seed: int = 0

    def check(self) -> None:
        """VoxnerfError naming the option that is out of range."""
        if self.camera_model not in CAMERA_MODELS:
            raise VoxnerfError(f"--camera-model {self.camera_model}: expected one of {', '.join(CAMERA_MODELS)}")
        if self.matcher not in MATCHERS:
            raise VoxnerfError(f"--matcher {self.matcher}: expected one of {', '.join(MATCHERS)}")
        if self.min_inliers < 5:
            raise VoxnerfError(f"--min-inliers {self.min_inliers}: expected at least 5")


def pipeline_options(options: SfmOptions) -> pycolmap.IncrementalPipelineOptions:
    """COLMAP's incremental mapper options with the inlier thresholds of `options`."""
    pipeline = pycolmap.IncrementalPipelineOptions()
    pipeline.num_threads = options.threads
    pipeline.mapper.init_min_num_inliers = options.min_inliers
    pipeline.mapper.abs_pose_min_num_inliers = max(10, round(0.3 * options.min_inliers))
    pipeline.min_model_size = 3
    return pipeline


def match(database: Path, options: SfmOptions) -> None:
    """Match the features of the image pairs the matcher picks, with geometric verification (CPU)."""
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = options.threads
    if options.matcher == "sequential":
        pycolmap.match_sequential(database, matching_options=matching, device=pycolmap.Device.cpu)
    else:
        pycolmap.match_exhaustive(database, matching_options=matching, device=pycolmap.Device.cpu)


def reconstruct(images: Path, work: Path, options: SfmOptions) -> pycolmap.Reconstruction:
    """Run structure from motion on the images in `images`; COLMAP's database and models go into `work`.

    Returns:
        The model that registers the most images.
    """
    options.check()
    pycolmap.set_random_seed(options.seed)
    work.mkdir(parents=True, exist_ok=True)
    database = work / "database.db"
    database.unlink(missing_ok=True)
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = options.camera_model
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = options.threads
    mode = pycolmap.CameraMode.SINGLE if options.single_camera else pycolmap.CameraMode.AUTO
    pycolmap.extract_features(database, images, camera_mode=mode, reader_options=reader,
                              extraction_options=extraction, device=pycolmap.Device.cpu)
    match(database, options)
    models = work / "models"
    shutil.rmtree(models, ignore_errors=True)
    models.mkdir()
    found = pycolmap.incremental_mapping(database, images, models, pipeline_options(options))
    if not found:
        raise VoxnerfError(f"{images}: structure from motion registered no images (too few matches between "
                           f"them: blur, too little texture or overlap; for small images try a lower --min-inliers)")
    return max(found.values(), key=lambda model: model.num_reg_images())


def undistort(model: Path, images: Path, out: Path) -> None:
    """COLMAP's undistortion of the model in `model` and its `images` to PINHOLE cameras: out/images and
    out/sparse/0."""
    work = out / "undistorted"
    shutil.rmtree(work, ignore_errors=True)
    pycolmap.undistort_images(work, model, images)
    shutil.move(work / "images", out / "images")
    (out / "sparse").mkdir(exist_ok=True)
    shutil.move(work / "sparse", out / "sparse" / "0")
    shutil.rmtree(work)
