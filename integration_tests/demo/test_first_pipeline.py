"""The README's first pipeline and docs/first-pipeline.md, run as written, the way a user runs
them: the code blocks as one script, started with this interpreter by its path (the package's
"venv" Python, not activated), in a minimal environment: no PYSPARK_PYTHON, and a PATH whose
`python3` is another interpreter (the system's, without the package or PySpark). Before the
package set PYSPARK_PYTHON itself, Spark looked the formats up with that `python3` and the
script failed with `[DATA_SOURCE_NOT_FOUND] Failed to find the data source: kafka-eos`.
One Spark session serves every block of both documents.

Only what a document cannot know is replaced, each replacement checked to be there (a changed
document fails here, naming the line): the broker's address, the working directory and the
topic names (unique per run: the suite's broker is shared), and the README's endless
`awaitTermination()`, which becomes "process what is there, then stop"."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from connectors.local.spark import QUICK_START_JAVA_OPTIONS
from integration_tests.support.kafka_data import create_topic

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


def replace(code: str, old: str, new: str, where: str) -> str:
    assert old in code, f"{where} no longer holds {old!r}: update this test with it"
    return code.replace(old, new)


def user_environment(tmp_path: Path) -> dict[str, str]:
    """What a fresh login shell has: HOME, a PATH with java and the system's tools, whose
    `python3` is not this interpreter; nothing of Spark's or this package's variables."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    system_python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
    if system_python and os.path.realpath(system_python) != os.path.realpath(sys.executable):
        (bin_dir / "python3").symlink_to(system_python)  # another interpreter than the venv
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)),
           "LANG": "C.UTF-8"}
    java = shutil.which("java")
    if java and os.path.dirname(java) not in ("/usr/bin", "/bin"):
        env["PATH"] += f":{os.path.dirname(java)}"
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    # The suite's cost, not the user's: the JVMs compile with C1 only and collect serially, as
    # every short-lived Spark of the suite does (local_spark's quick start; measured here on a
    # loaded machine, the script took 69 s instead of 103 s). What is under test, which Python
    # Spark starts, does not depend on it.
    env["JDK_JAVA_OPTIONS"] = QUICK_START_JAVA_OPTIONS
    return env


def test_the_first_pipeline_page_and_the_readme_run_as_written(bootstrap, tmp_path):
    page = (ROOT / "docs" / "first-pipeline.md").read_text()
    blocks = python_blocks(page)
    assert len(blocks) == 5, "docs/first-pipeline.md: expected its five python blocks"
    run = uuid.uuid4().hex[:8]
    orders, enriched = f"orders-{run}", f"orders-enriched-{run}"
    workdir = tmp_path / "work"
    first = blocks[0]
    first = replace(first, 'BOOTSTRAP = "127.0.0.1:9092"', f'BOOTSTRAP = "{bootstrap}"',
                    "docs/first-pipeline.md")
    first = replace(first, 'WORKDIR = "/tmp/kafka-eos-first-pipeline"',
                    f'WORKDIR = "{workdir}"', "docs/first-pipeline.md")
    first = replace(first, 'ORDERS, ENRICHED = "orders", "orders-enriched"',
                    f'ORDERS, ENRICHED = "{orders}", "{enriched}"', "docs/first-pipeline.md")
    page_code = "\n".join([first, *blocks[1:]])

    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## A first pipeline\n", 1)[1].split("\n## ", 1)[0]
    (readme_code,) = python_blocks(section)
    events = f"events-{run}"
    create_topic(bootstrap, events, 2)
    for old, new in [('"127.0.0.1:9092"', f'"{bootstrap}"'),
                     ('.option("subscribe", "events")', f'.option("subscribe", "{events}")'),
                     ('"/tmp/kafka-eos/events"', f'"{tmp_path / "events"}"'),
                     ('"/tmp/kafka-eos/checkpoints/events"', f'"{tmp_path / "ck-events"}"'),
                     ("query.awaitTermination()", "query.processAllAvailable()\nquery.stop()")]:
        readme_code = replace(readme_code, old, new, "README.md")
    # the README's pipeline reads the page's orders, in the same session
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        producer.produce(events, f"v{i}", key=f"k{i}")
    producer.flush(30)

    script = tmp_path / "first_pipeline.py"
    script.write_text(page_code + "\n# --- README.md: A first pipeline ---\n" + readme_code)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=user_environment(tmp_path),
                          capture_output=True, text=True, timeout=600)
    took = time.monotonic() - started
    print(f"the first pipeline ran in {took:.1f} s")
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-5000:]}"

    expected = page.split("It prints:\n\n```\n", 1)[1].split("```", 1)[0]
    expected = expected.replace("orders-enriched", enriched)
    assert expected.strip() in proc.stdout, proc.stdout[-2000:]
    assert pq.read_table(tmp_path / "events").num_rows == 40
    # quiet by default: no registration over the statically found formats
    assert "replaced a statically registered data source" not in proc.stderr
