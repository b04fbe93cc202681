"""The data behind the book's step figures and animations (PNG images are not compared,
so what they show is checked here)."""

from __future__ import annotations

import re

import matplotlib
import pytest

from allreduce import chunk_bounds, viz

matplotlib.use("Agg")


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6])
@pytest.mark.parametrize("count", [12, 13])  # 13 is not divisible by any p here
def test_ring_states_follow_the_chapter(p, count):
    trace, states = viz.record_states("ring", p, count)
    full = (1 << p) - 1
    assert states.shape == (2 * (p - 1) + 1, p, count)
    assert all((states[0, r] == 1 << r).all() for r in range(p))
    assert (states[-1] == full).all()
    for t in range(1, len(states)):  # data is only ever added, never lost
        assert ((states[t] & states[t - 1]) == states[t - 1]).all()
    after_reduce_scatter = states[p - 1]
    for r in range(p):  # rank r owns chunk r, complete, after p-1 steps
        lo, hi = chunk_bounds(count, p, r)
        assert (after_reduce_scatter[r, lo:hi] == full).all()
    for t in range(1, len(states)):  # one chunk changes per rank per step
        for r in range(p):
            changed = {c for c in range(p)
                       if (states[t, r, slice(*chunk_bounds(count, p, c))]
                           != states[t - 1, r, slice(*chunk_bounds(count, p, c))]).any()}
            assert len(changed) == 1
        assert sum(1 for m in trace.messages() if m[0] == t) == p


def test_chunk_labels_name_the_contributors():
    _, states = viz.record_states("ring", 3, 6)
    labels = viz.chunk_labels(states, 3)
    assert labels[0] == [["0"] * 3, ["1"] * 3, ["2"] * 3]
    assert labels[-1] == [["all"] * 3] * 3
    assert labels[1][1][2] == "0+1"  # step 1: rank 0 sends chunk (0-1) mod 3 = 2 to rank 1


def test_rank_sets_are_labelled_with_plus_everywhere():
    """One notation for a set of ranks, in the figures as in the tables: "0+1+2", never a
    range "0-2" (or "0–2"), which reads as a subtraction."""
    assert viz.compact_label(0b0111, 4) == "0+1+2"
    assert viz.compact_label(0b1011, 4) == "0+1+3"
    assert viz.compact_label(0b1111, 4) == "all"
    assert viz.compact_label(0b1001111, 8) == "0+1+2+3+6"
    trace, states = viz.record_states("tree", 8, 4)  # its partial sums are runs: 0+1+2+3
    figure = viz.step_figure(trace, states, 1)
    labels = {text.get_text() for ax in figure.axes for text in ax.texts}
    assert "0+1+2+3" in labels and "4+5+6+7" in labels, labels
    assert all(re.fullmatch(r"all|\d+(\+\d+)*", label) for label in labels), labels
    assert {label for step in viz.chunk_labels(states, 1) for row in step for label in row} \
        <= labels | {"mixed"}


def test_figure_and_animation_have_one_panel_and_frame_per_step():
    trace, states = viz.record_states("ring", 4, 8)
    names = viz.ring_step_names(4)
    figure = viz.step_figure(trace, states, 4, names)
    assert sum(ax.has_data() for ax in figure.axes) == len(states) == len(names)
    animation = viz.animate(trace, states, 4, names)
    html = animation.to_jshtml()
    assert html.count("data:image/png;base64") == len(states)


def test_contribution_traces_need_a_bit_per_rank():
    with pytest.raises(ValueError, match="1..62"):
        viz.record_states("ring", 63, 4)


def test_markdown_table_renders_as_markdown_in_a_notebook():
    table = viz.markdown_table(["a", "b"], [[1, "x"], [2, "y"]])
    assert table == "| a | b |\n|---|---|\n| 1 | x |\n| 2 | y |"
    assert table._repr_markdown_() == str(table)


# --- the book's figure style and the record the legibility test reads (issue 16, part 3) ---


@pytest.fixture
def book_style():
    """The book's style inside an rc context, so other tests keep matplotlib's defaults."""
    with matplotlib.rc_context():
        viz.use_book_style()
        yield


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_a_saved_figure_records_its_smallest_text(book_style, fmt):
    import io

    import matplotlib.pyplot as plt

    from allreduce.viz import style

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.text(0.5, 0.5, "tiny", fontsize=6)
    ax.text(0.2, 0.2, "hidden", fontsize=3, visible=False)  # not drawn: not counted
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=200, bbox_inches="tight")
    plt.close(fig)
    record = style.read_record(buffer.getvalue())
    assert record["smallest_pt"] == 6 and record["text"] == "tiny"
    natural = record["width_px"] / 200 * 96 if fmt == "png" else record["width_pt"] * 4 / 3
    # drawn at its natural size (1 in = 96 CSS px), 6 pt is 8 CSS px; at half that width, 4
    assert style.smallest_css_px(record, natural) == pytest.approx(8)
    assert style.smallest_css_px(record, natural / 2) == pytest.approx(4)
    assert style.read_record(b"\x89PNG\r\n\x1a\n") is None


@pytest.mark.parametrize("p", [2, 5, 8])
def test_step_figures_scale_with_the_ranks(book_style, p):
    """One row per rank, panels wrapped to the page's width, text never below 9 pt."""
    import matplotlib.pyplot as plt

    from allreduce.viz import style

    trace, states = viz.record_states("ring", p, 2 * p)
    figure = viz.step_figure(trace, states, p, viz.ring_step_names(p))
    width, height = figure.get_size_inches()
    assert width <= style.PAGE_WIDTH_IN
    panels = [ax for ax in figure.axes if ax.has_data()]
    assert len(panels) == len(states)
    assert all(ax.get_ylim() == (p, 0) for ax in panels)  # a row per rank
    rows, columns = panels[0].get_subplotspec().get_gridspec().get_geometry()
    assert rows * columns >= len(states) and height >= rows * p * 0.3
    assert style.smallest_text(figure)[0] >= style.SMALLEST_PT
    plt.close(figure)


def test_animations_describe_themselves():
    trace, states = viz.record_states("ring", 3, 6)
    html = viz.animation_html(viz.animate(trace, states, 3, viz.ring_step_names(3)))
    assert 'alt="An animation of 5 frames on 3 ranks' in html
    assert 'alt="the ring, step by step"' in viz.animation_html(
        viz.animate(trace, states, 3), alt="the ring, step by step")


def test_animation_controls_are_svg_icons_with_names():
    """Each control of the player holds an inline SVG icon (a shape in the button's colour,
    hidden from screen readers) and no text, and is named by its aria-label and title; the
    browser test (tests/browser, test_animation_controls_are_drawn) checks they are drawn."""
    from html.parser import HTMLParser

    class Buttons(HTMLParser):
        def __init__(self):
            super().__init__()
            self.buttons, self.inside = [], False

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "button":
                self.inside = True
                self.buttons.append({"attrs": attrs, "tags": [], "text": ""})
            elif self.inside:
                self.buttons[-1]["tags"].append((tag, attrs))

        def handle_startendtag(self, tag, attrs):
            self.handle_starttag(tag, attrs)

        def handle_endtag(self, tag):
            self.inside = self.inside and tag != "button"

        def handle_data(self, data):
            if self.inside:
                self.buttons[-1]["text"] += data

    trace, states = viz.record_states("ring", 3, 6)
    parser = Buttons()
    parser.feed(viz.animation_html(viz.animate(trace, states, 3)))
    names = [b["attrs"].get("aria-label") for b in parser.buttons]
    assert names == ["Decrease speed", "First frame", "Previous frame", "Play backwards",
                     "Pause", "Play", "Next frame", "Last frame", "Increase speed"]
    paths = set()
    for button in parser.buttons:
        assert button["attrs"]["title"] == button["attrs"]["aria-label"]
        assert not button["text"].strip(), button  # no glyph a font may lack
        (svg, svg_attrs), (path, path_attrs) = button["tags"]
        assert (svg, path) == ("svg", "path") and svg_attrs["aria-hidden"] == "true"
        assert path_attrs["fill"] == "currentColor" and re.fullmatch(r"M[\d. MLHVhvlz-]+z",
                                                                     path_attrs["d"])
        paths.add(path_attrs["d"])
    assert len(paths) == len(parser.buttons)  # nine different icons


def test_a_sparse_message_of_several_packets_is_drawn_whole():
    """Bruck's all-gather forwards all the blocks a rank holds in one message, packets back
    to back: the pictures count and draw every packet's pairs, not only the first's."""
    import numpy as np

    from allreduce.viz.messages import pairs_table, record_sparse, sent

    rng = np.random.default_rng(3)
    vectors = [(np.sort(rng.choice(48, size=k, replace=False)), np.ones(k, np.float32))
               for k in (5, 0, 7, 3, 6)]
    trace = record_sparse("allgather", vectors, 48)
    ks = [len(indices) for indices, _ in vectors]
    # 5 ranks: distances 1, 2 and 4; the last step sends only the one block still missing
    assert pairs_table(trace, np.float32) == [
        ks, [ks[r] + ks[(r + 1) % 5] for r in range(5)], [ks[r] for r in range(5)]]
    for step, source, dest, indices, span, dense in sent(trace, np.float32):
        held = [(source + i) % 5 for i in range(min(1 << (step - 1), 5 - (1 << (step - 1))))]
        assert dest == (source - (1 << (step - 1))) % 5 and span == (0, 48) and not dense
        assert sorted(indices.tolist()) == sorted(i for r in held for i in vectors[r][0])
