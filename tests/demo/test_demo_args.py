"""The demo's command line: the compactor follows the stream by default, the timer stays an
option to compare with (no Spark: the arguments only)."""

import pytest

from demo.__main__ import _parser, _positive
from demo.options import PipelineOptions


def parse(*argv: str):
    parser = _parser()
    args = parser.parse_args(list(argv))
    _positive(parser, args)
    return args


def test_the_demo_follows_the_stream_unless_told_to_use_the_timer():
    assert parse().compactor == "follow"
    assert PipelineOptions(compactor="follow").follows
    # the library's default stays the timer the pipeline benchmarks were measured with
    assert not PipelineOptions().follows
    timer = parse("--compactor", "timer", "--compact-every-s", "5")
    assert (timer.compactor, timer.compact_every_s) == ("timer", 5.0)
    assert parse("--full-plan-every-s", "30").full_plan_every_s == 30.0


def test_an_uncoordinated_run_compacts_on_the_timer():
    # the follower needs the service; the baseline without lakelock has none
    assert not PipelineOptions(compactor="follow", coordinated=False).follows


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compactor", "hourly"], "--compactor must be one of follow, timer"),
        (["--full-plan-every-s", "0"], "--full-plan-every-s must be > 0"),
    ],
)
def test_the_demo_refuses_a_compactor_it_does_not_know(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_demo_runs_on_local_files_unless_told_s3():
    assert parse().storage == "file"
    on_s3 = parse("--storage", "s3", "--s3-endpoint", "https://s3.eu-west-1.amazonaws.com")
    assert on_s3.storage == "s3" and on_s3.s3_endpoint.startswith("https://")
    assert parse("--storage", "s3").s3_bucket == "lake"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--storage", "hdfs"], "--storage must be one of file, s3"),
        (["--s3-endpoint", "http://127.0.0.1:9000"], "--s3-endpoint goes with --storage s3"),
        (["--format-version", "1"], "--format-version: format version 1: use 2 or 3"),
        (["--write-mode", "rewrite"], "--write-mode: write mode 'rewrite': use merge-on-read"),
    ],
)
def test_the_demo_refuses_a_storage_or_table_it_does_not_know(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_demo_on_s3_is_coordinated(tmp_path):
    from demo.pipeline import Pipeline

    options = PipelineOptions(storage="s3", coordinated=False, workdir=tmp_path / "run")
    with pytest.raises(ValueError, match="catalog front"):
        Pipeline(options).run()


def test_the_demo_table_takes_position_deletes_unless_told_deletion_vectors():
    assert parse().format_version == PipelineOptions().format_version == 2
    assert parse("--format-version", "3").format_version == 3
    assert parse("--storage", "s3", "--format-version", "3").format_version == 3


def test_the_demo_table_is_merge_on_read_unless_told_copy_on_write():
    assert parse().write_mode == PipelineOptions().write_mode == "merge-on-read"
    assert parse("--write-mode", "copy-on-write").write_mode == "copy-on-write"
