"""A run's scene record: plain values in the checkpoint, old checkpoints still readable, one background."""

from __future__ import annotations

import dataclasses

import numpy as np

from voxnerf.data.normalize import space_for
from voxnerf.run.load import SceneRecord


def test_scene_record_round_trips_through_plain_values(general_scene):
    record = SceneRecord.of(general_scene, space_for(general_scene, "box"))
    again = SceneRecord.from_dict(record.to_dict())
    for f in dataclasses.fields(SceneRecord):
        np.testing.assert_array_equal(getattr(again, f.name), getattr(record, f.name))


def test_the_record_background_is_the_scenes_scoring_background(general_scene, make_scene):
    opaque = make_scene(channels=3, masks=False)
    for scene in (general_scene, opaque):
        record = SceneRecord.of(scene, space_for(scene, "box"))
        assert record.background.dtype == np.float32 and record.background.shape == (3,)
        np.testing.assert_array_equal(record.background, scene.render_background)


def test_an_old_record_without_background_renders_on_black(general_scene):
    old = SceneRecord.of(general_scene, space_for(general_scene, "box")).to_dict() | {"background": None}
    np.testing.assert_array_equal(SceneRecord.from_dict(old).background, np.zeros(3, np.float32))
