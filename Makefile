# Two entry points: `make app` and `make test`. Both set up what a fresh Debian machine lacks.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Qt's offscreen and xcb platforms need these; missing fonts give no error, only empty boxes.
# Xvfb and Mesa give the 3-D view an OpenGL context where there is no display; Graphviz's dot
# lays out `gradviz graph`'s SVG and PNG.
DEBIAN_PACKAGES := libgl1 libegl1 libxkbcommon0 libfontconfig1 libglib2.0-0 libdbus-1-3 fonts-dejavu-core \
	xvfb xauth libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 \
	libxcb-shape0 libxcb-xkb1 libxkbcommon-x11-0 libgl1-mesa-dri graphviz

.PHONY: app test setup lint bench clean

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		else echo "Please install these Debian packages first: $$missing"; exit 1; fi; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test,dev]'
	touch $@

app: setup
	@if [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ]; then \
		$(BIN)/gradviz; \
	else \
		mkdir -p out && $(BIN)/gradviz snapshot forgot-zero-grad --ops 40 -o out/gradviz.png && \
		echo "No display here, so the window was drawn offscreen into out/gradviz.png; on a desktop, make app opens it."; \
	fi

test: setup
	# One worker per core (pytest-xdist): the suite is CPU-bound, one intra-op thread per process.
	$(BIN)/python -m pytest -q -m "not gl" -n auto
	# The 3-D (OpenGL) tests need an X server: a virtual one here. One process per file: in one
	# process, pyqtgraph items can fail to draw in a GL context made after an earlier test's closed.
	for file in $$(grep -rl "mark.gl$$" tests --include="test_*.py"); do \
		xvfb-run -a -s "-screen 0 1280x720x24" env QT_QPA_PLATFORM=xcb $(BIN)/python -m pytest -q -m gl $$file || exit 1; \
	done

lint: setup
	$(BIN)/ruff check gradviz tests bench
	$(BIN)/ruff format --check gradviz tests bench
	$(BIN)/mypy

bench: setup
	$(BIN)/python bench/bench_engine.py

clean:
	rm -rf $(VENV) out build dist
