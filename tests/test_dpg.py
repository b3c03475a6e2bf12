"""DPG-Bench scoring (cogrpo.benchmarks.dpg) against what DPG's own script does, and the VQA plug-ins."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cogrpo.benchmarks.dpg import ItemScore, l1_of, load_question_graph, score_images, score_item, summarize, tiles
from cogrpo.benchmarks.vqa import TransformersVQA, load_vqa
from cogrpo.errors import InputError

SAMPLE = Path(__file__).resolve().parents[1] / "data/benchmarks/dsg_tifa160_dev_anns.csv"
HEADER = ("item_id,text,keywords,proposition_id,dependency,category_broad,category_detailed,tuple,"
          "question_natural_language\n")


@pytest.fixture(scope="module")
def full():
    return load_question_graph(SAMPLE, skip_first_row=False, strict=False)


@pytest.fixture(scope="module")
def skipped():
    return load_question_graph(SAMPLE, skip_first_row=True, strict=False)


def write(tmp_path, rows: str, header: str = HEADER) -> Path:
    p = tmp_path / "bad.csv"
    p.write_text(header + rows)
    return p


def answers(item, no=(), yes="yes", other=None):
    """Every question answered `yes`, except the qids in `no` ("no") and those in `other` (their given answer)."""
    out = {q: ("no" if q in no else yes) for q in item.questions}
    out.update(other or {})
    return out


def test_first_row_skip_counts(full, skipped):
    assert len(full) == len(skipped) == 160
    # 920 data rows, 919 read with the skip; 3 (item, proposition) pairs repeat and collapse, as in DPG's dicts
    assert sum(len(i.questions) for i in full.values()) == 917
    assert sum(len(i.questions) for i in skipped.values()) == 916
    q = full["coco_366619"].questions[5]  # lines 133 and 134: the later row wins, in the earlier one's place
    assert (q.line, q.parents, list(full["coco_366619"].questions)[4]) == (134, (1,), 5)
    assert list(full["coco_62896"].questions) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert list(skipped["coco_62896"].questions) == [2, 3, 4, 5, 6, 7, 8, 9]
    q = full["coco_62896"].questions[5]
    assert (q.parents, q.category, q.category_broad, q.line) == ((1, 3), "relation - spatial", "relation", 6)
    assert q.question == "Is the light a traffic light?"


def test_skip_makes_the_first_item_fail_as_in_dpg(skipped):
    """DPG's script raises KeyError on question 5 (parent 1 was the skipped row) and drops the image."""
    with pytest.raises(InputError, match="coco_62896: proposition 5 depends on 1"):
        score_item(skipped["coco_62896"], [answers(skipped["coco_62896"])])


def test_sample_is_rejected_when_strict():
    """The DSG sample has blank questions (first at line 115) that DPG would ask verbatim."""
    with pytest.raises(InputError) as e:
        load_question_graph(SAMPLE)
    assert str(e.value).startswith(f"{SAMPLE}:115: empty question") and "\n" not in str(e.value)


def test_dependency_rule(full):
    item = full["coco_62896"]  # 5: (1,3), 6: (2,3), 7: (1,4), 8: (2,4), 9: (3,4)
    s = score_item(item, [answers(item, no={1})])
    assert s.tile_scores == [6 / 9] and s.score == 6 / 9  # 1 said no; 5 and 7 said yes but are zeroed
    assert s.categories == {"entity - whole": [0.0, 1.0, 1.0, 1.0], "relation - spatial": [1.0] * 5}  # before zeroing
    assert s.broad == {"entity": [0.0, 1.0, 1.0, 1.0], "relation": [0.0, 1.0, 0.0, 1.0, 1.0]}  # after zeroing
    assert s.broad_means["relation"] == pytest.approx(0.6)
    assert score_item(item, [answers(item, other={1: "Yes"})]).score == 6 / 9  # only exactly "yes" counts


def test_zeroing_cascades_in_csv_order_and_stops_at_first_zero_parent(full):
    item = full["coco_758774"]  # 4: (1), 5: (4), 8: (1,3), 9: (1,2) with 2 missing
    s = score_item(item, [answers(item, no={1})])
    # 4 zeroed by 1, 5 by the zeroed 4, 8 and 9 by 1 (9 never reaches its missing parent 2): 3, 6, 7 stand
    assert s.score == 3 / 8
    with pytest.raises(InputError, match="proposition 9 depends on 2"):
        score_item(item, [answers(item)])


def test_zeroing_reads_parents_as_already_walked(tmp_path):
    """A child listed before its parent sees the parent's score before the parent is zeroed (DPG does this)."""
    p = write(tmp_path, "x,t,,1,0,entity,whole,entity - whole (a),A?\n"
                        "x,t,,3,2,attribute,color,attribute - color (b),C?\n"
                        "x,t,,2,1,entity,whole,entity - whole (b),B?\n")
    item = load_question_graph(p, skip_first_row=False)["x"]
    assert score_item(item, [{1: "no", 2: "yes", 3: "yes"}]).score == 1 / 3  # 3 kept, 2 zeroed


def test_tile_average_and_last_tile_categories(full):
    item = full["coco_62896"]
    per_tile = [answers(item), answers(item, no=set(item.questions)), answers(item, no={1}), answers(item, no={3})]
    s = score_item(item, per_tile)
    assert s.tile_scores == [1.0, 0.0, 6 / 9, 5 / 9]  # no 3 zeroes 5, 6 and 9
    assert s.score == pytest.approx((1 + 0 + 6 / 9 + 5 / 9) / 4)
    assert s.categories == {"entity - whole": [1.0, 1.0, 0.0, 1.0], "relation - spatial": [1.0] * 5}  # last tile
    assert s.broad["entity"] == pytest.approx([0.5, 0.75, 0.5, 0.75])
    assert s.broad["relation"] == pytest.approx([0.25, 0.5, 0.5, 0.75, 0.5])


class TileVQA:
    """Scripted judge: says "no" to question `no_question` on tiles whose red level is in `no_reds`."""

    def __init__(self, no_question: str, no_reds: set[int]):
        self.no_question, self.no_reds, self.calls = no_question, no_reds, 0

    def answer(self, images, questions):
        self.calls += 1
        return ["no" if q == self.no_question and np.asarray(im)[0, 0, 0] in self.no_reds else "yes"
                for im, q in zip(images, questions)]


def grid_image() -> np.ndarray:
    img = np.zeros((64, 64, 3), np.uint8)
    img[:32, :32, 0], img[:32, 32:, 0], img[32:, :32, 0], img[32:, 32:, 0] = 10, 20, 30, 40
    return img


def test_tiles_order_and_sizes():
    parts = tiles(grid_image())
    assert [np.asarray(t)[0, 0, 0] for t in parts] == [10, 20, 30, 40]  # TL, TR, BL, BR as DPG crops
    assert all(t.size == (32, 32) for t in parts)
    assert len(tiles(Image.new("RGB", (96, 96)), grid=3)) == 9
    with pytest.raises(InputError, match="65x64"):
        tiles(np.zeros((64, 65, 3), np.uint8))


def test_score_images_with_scripted_vqa(full):
    item = full["coco_62896"]
    vqa = TileVQA("Is there a light?", {20, 40})  # question 1 fails on the right-hand tiles
    s = score_images(vqa, item, grid_image())
    assert vqa.calls == 1 and s.tile_scores == [1.0, 6 / 9, 1.0, 6 / 9]
    assert s.categories["entity - whole"] == [0.0, 1.0, 1.0, 1.0]
    assert score_images(vqa, item, grid_image(), num_tiles=1).tile_scores == [1.0]


def test_summary_pools_questions_and_scales_by_100():
    a = ItemScore("a", 0.5, [0.5], {"entity - whole": [1.0, 0.0], "relation - spatial": [1.0]}, {"entity": [1.0, 0.0]})
    b = ItemScore("b", 1.0, [1.0], {"entity - part": [1.0, 1.0], "entity - whole": [1.0], "global -": [0.0]},
                  {"entity": [1.0], "global": [0.0]})
    out = summarize([a, b])
    assert out["score"] == 75.0 and out["items"] == 2
    assert out["l2"] == pytest.approx({"entity - part": 100.0, "entity - whole": 200 / 3, "global -": 0.0,
                                       "relation - spatial": 100.0})
    assert out["l1"] == pytest.approx({"entity": 80.0, "global": 0.0, "relation": 100.0})  # pooled, not 83.3
    assert out["category_broad"] == pytest.approx({"entity": 200 / 3, "global": 0.0})
    assert l1_of("other - text rendering") == "other"
    with pytest.raises(InputError):
        summarize([])


@pytest.mark.parametrize("header,rows,where,what", [
    (HEADER.replace(",tuple", ""), "x,t,,1,0,entity,whole,A?\n", ":1:", "missing column(s) tuple"),
    (HEADER, "x,t,,1,0,entity,whole,e - w (a),A?\nx,t,,2,1;2,entity,whole,e - w (b),B?\n", ":3:", "'1;2'"),
    (HEADER, "x,t,,1,0,entity,whole,e - w (a),A?\nx,t,,two,1,entity,whole,e - w (b),B?\n", ":3:", "'two'"),
    (HEADER, "x,t,,1,0,entity,whole,e - w (a),A?\nx,t,,2,5,entity,whole,e - w (b),B?\n", ":3:", "depends on 5"),
    (HEADER, "x,t,,1,0,entity,whole,e - w (a),A?\nx,t,,2,1,entity,whole,e - w (b), \n", ":3:", "empty question"),
    (HEADER, "x,t,,1,0,e,w,e - w (a),A?\ny,t,,1,0,e,w,e - w (a),A?\nx,t,,2,0,e,w,e - w (b),B?\n", ":4:",
     "appears again"),
    (HEADER, "x,t,,1,0,e,w,e - w (a),A?\nx,t,,1,0,e,w,e - w (b),B?\n", ":3:", "proposition 1 repeated"),
])
def test_bad_csv_names_file_and_line(tmp_path, header, rows, where, what):
    p = write(tmp_path, rows, header)
    with pytest.raises(InputError) as e:
        load_question_graph(p, skip_first_row=False)
    msg = str(e.value)
    assert msg.startswith(f"{p}{where}") and what in msg and "\n" not in msg


def test_lenient_reads_repeats_as_dpg(tmp_path):
    p = write(tmp_path, "x,t,,1,0,e,w,e - w (a),A?\ny,t,,1,0,e,w,e - w (b),B?\nx,t,,2,0,e,w,e - w (c),C?\n"
                        "y,t,,1,0,e,w,e - w (d),D?\n")
    items = load_question_graph(p, skip_first_row=False, strict=False)
    assert list(items) == ["x", "y"]  # each reappearing item restarts, in its first place
    assert [q.question for i in items.values() for q in i.questions.values()] == ["C?", "D?"]


def test_strict_allows_a_dependency_on_the_skipped_row(tmp_path):
    p = write(tmp_path, "x,t,,1,0,e,w,e - w (a),A?\nx,t,,2,1,e,w,e - w (b),B?\nx,t,,3,0,e,w,e - w (c),C?\n")
    assert list(load_question_graph(p)["x"].questions) == [2, 3]
    p = write(tmp_path, "x,t,,1,0,e,w,e - w (a),A?\nx,t,,2,9,e,w,e - w (b),B?\nx,t,,3,0,e,w,e - w (c),C?\n")
    with pytest.raises(InputError, match=":3: item x proposition 2 depends on 9"):
        load_question_graph(p)


# --- the transformers plug-in on a tiny random-weight BLIP VQA ---

@pytest.fixture(scope="module")
def tiny_blip(tmp_path_factory):
    import torch
    from transformers import BertTokenizer, BlipConfig, BlipForQuestionAnswering, BlipImageProcessorPil, BlipProcessor

    path = tmp_path_factory.mktemp("blip")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "YES", "no", "is", "there", "a", "light", "?"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizer(str(path / "vocab.txt"), bos_token="[DEC]")
    text = dict(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=37, max_position_embeddings=64, encoder_hidden_size=32, bos_token_id=5,
                pad_token_id=0, sep_token_id=3)
    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37, image_size=32,
                  patch_size=8)
    torch.manual_seed(0)
    model = BlipForQuestionAnswering(BlipConfig(text_config=text, vision_config=vision, projection_dim=32)).eval()
    with torch.no_grad():  # the decoder always says "YES" first
        model.text_decoder.cls.predictions.decoder.bias[vocab.index("YES")] = 1e4
    model.save_pretrained(path)
    BlipProcessor(image_processor=BlipImageProcessorPil(size={"height": 32, "width": 32}), tokenizer=tok).save_pretrained(path)
    return path


def test_transformers_vqa_answers_each_question(tiny_blip, full):
    vqa = load_vqa("blip", tiny_blip, device="cpu", max_new_tokens=1, batch_size=3)
    ims = tiles(grid_image())
    out = vqa.answer(ims + ims[:1], ["is there a light?", "is there a", "a?", "light", "?"])
    assert out == ["yes"] * 5  # decoded "YES", lower-cased
    free = TransformersVQA(tiny_blip, device="cpu", max_new_tokens=3).answer(ims[:2], ["is there a light?"] * 2)
    assert len(free) == 2 and all(a.split()[0] == "yes" and a == a.lower().strip() for a in free)
    s = score_images(vqa, full["coco_62896"], grid_image())
    assert s.score == 1.0 and s.tile_scores == [1.0] * 4


def test_vqa_plugins_fail_in_one_line(tmp_path):
    with pytest.raises(InputError, match="VQA model folder not found") as e:
        TransformersVQA(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value)
    if importlib.util.find_spec("modelscope") is None:
        with pytest.raises(InputError, match="modelscope is not installed"):
            load_vqa("mplug", tmp_path)
    with pytest.raises(InputError, match="unknown VQA kind"):
        load_vqa("clip", tmp_path)
