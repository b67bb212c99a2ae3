import os

from pods_rl.files import write_atomic


def test_write_atomic_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "new" / "summary.json"
    write_atomic(path, "first")
    write_atomic(path, "second")
    assert path.read_text() == "second"
    assert sorted(os.listdir(path.parent)) == ["summary.json"]
