"""A process starts without the heavy libraries: the web process (the ASGI app with its URLs), a
worker's Celery app and every `manage.py` command load torch, Chroma, the OCR and document libraries
only when a request or a job first uses them. Each costs a second or more of start (torch alone about
one), paid by every web process, worker and management command, and by every test that starts one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "chromadb", "sentence_transformers", "transformers", "onnxruntime", "rapidocr",
         "pdfplumber", "pypdfium2", "openpyxl", "pyarrow", "docx", "pptx")
PROBE = """
import json, sys
import django
django.setup()
import hdrag_site.asgi, hdrag_site.celery
from django.urls import get_resolver
get_resolver().url_patterns
from django.core.management import call_command
call_command("check", verbosity=0)
print(json.dumps(sorted(name for name in sys.argv[1:] if name in sys.modules)))
"""


def test_the_web_process_and_manage_py_start_without_the_heavy_libraries(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "hdrag_site.settings", "DATA_DIR": str(tmp_path)}
    for name in ("DATABASE_URL", "REDIS_URL"):
        env.pop(name, None)
    result = subprocess.run([sys.executable, "-c", PROBE, *HEAVY], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []
    # The probe sees a library once it is used: the engine's encoder making a tensor brings torch in.
    used = ("import sys, numpy, engine.encoder; engine.encoder._tensor(numpy.zeros(1)); "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", used], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == "True", result.stderr
