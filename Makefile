# mindverse.sglang_pd — see README.md.
SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The images set-up builds (SGLANG_PD_BASE_IMAGE, SGLANG_PD_NODE_IMAGE), for molecule and pytest.
$(foreach name,$(shell bash scripts/setup/image_names.sh),$(eval export $(name)))

.PHONY: demo demo-down test setup checks lint build ee unit sanity molecule molecule-% bench mutation clean

setup:
	bash scripts/setup/all.sh

demo: setup
	ansible-playbook tests/fleet/up.yml -i inventories/local
	ansible-playbook site.yml -i inventories/local
	@bash scripts/demo_summary.sh

demo-down:
	ansible-playbook tests/fleet/down.yml -i inventories/local

test: setup build ee checks molecule

# lint, unit and sanity share no files they write: run side by side, each one's output kept together.
checks:
	$(MAKE) --no-print-directory -j3 --output-sync=target lint unit sanity

lint:
	yamllint -s .
	ansible-lint --profile production
	@for m in plugins/modules/*.py; do \
	  ansible-doc mindverse.sglang_pd.$$(basename $$m .py) >/dev/null || exit 1; done
	@echo "ansible-doc renders every module"

build:
	ansible-galaxy collection build --force --output-path .cache/dist

# The execution environment of execution-environment.yml (AWX, Ansible Automation Platform), with
# the collection as `build` made it; the fleet scenario runs site.yml inside it.
ee: setup build
	bash scripts/setup/ee.sh

# Four processes on two cores: most integration tests wait on a playbook, a container or a server.
# A file's tests stay in one process (--dist loadfile): they share its module fixtures.
unit:
	python -m pytest tests/unit tests/integration -q -rs -p no:cacheprovider -n 4 --dist loadfile

sanity:
	bash scripts/sanity.sh --requirements

# faults and scale share one fleet: faults builds it and hands it on (--destroy never),
# scale runs on it with sglang-router, then again with SMG (FLEET_ROUTER=smg: the converge
# moves the router to SMG; only the phases a router acts in) and removes it; a fleet an
# earlier run left behind goes first. hosts and image run side by side before them, each on nodes
# of its own (their verifies bound latency loosely); fleet, faults and scale then run alone (each
# keeps both cores busy: beside the checks or each other, every one of them slows down as much).
molecule:
	$(MAKE) --no-print-directory -j2 --output-sync=target molecule-hosts molecule-image
	molecule test -s fleet
	molecule destroy -s faults
	molecule test -s faults --destroy never
	molecule test -s scale --destroy never
	FLEET_ROUTER=smg molecule test -s scale

molecule-%:  # one scenario: make molecule-hosts
	molecule test -s $*

mutation: setup  # not part of make test: mutation testing of the planning filters (docs/testing.md)
	bash scripts/mutation.sh

bench: setup  # each run appends a dated section to docs/benchmarks/results.md; docs/benchmarks.md indexes the current figures
	python bench/bench_image_artifacts.py --repeat 5 --append docs/benchmarks/results.md
	python bench/bench_scale_out.py --runs 2 --append docs/benchmarks/results.md
	python bench/bench_model_verify.py --append docs/benchmarks/results.md
	python bench/bench_model_stage.py --append docs/benchmarks/results.md
	python bench/bench_health_lag.py --runs 2 --append docs/benchmarks/results.md
	python bench/bench_render.py --hosts 32 1000 --runs 3 --append docs/benchmarks/results.md
	python bench/bench_scaling.py --nodes 3 6 12 --noop-runs 2 --append docs/benchmarks/results.md
	$(MAKE) --no-print-directory demo
	python bench/bench_noop.py --runs 3 --append docs/benchmarks/results.md
	$(MAKE) --no-print-directory demo-down

clean: demo-down
