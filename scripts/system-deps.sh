#!/bin/sh
# Installs the Debian packages the test suite needs, or stops at once naming them.
# `make test` and `.ci/run` call this before pytest, so no test fails deep inside
# the suite for want of a program.
#
#   chromium    renders the review page headless (tests/test_review.py) and is the phone of tests/test_web.py
#   chromium-driver  chromedriver, through which Selenium drives that Chromium (tests/test_web.py)
#   postgresql  the throwaway server the store tests start themselves (tests/pg_server.py)
#   openssh-client  ssh-keygen, ssh-agent and ssh-add: the reviewers' keys that sign (tests/test_evidence.py)
set -eu

missing=""
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || missing="$missing chromium"
[ -x /usr/bin/chromedriver ] || missing="$missing chromium-driver"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing="$missing postgresql"
command -v ssh-keygen >/dev/null 2>&1 && command -v ssh-agent >/dev/null 2>&1 || missing="$missing openssh-client"

[ -z "$missing" ] && exit 0
missing=${missing# }

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "make test needs Debian's package(s): $missing — install them (sudo apt-get install -y $missing), then run make test again" >&2
    exit 1
fi
echo "installing Debian package(s) the tests need: $missing" >&2
# A Debian install of postgresql would create and start a default cluster: the tests start their own.
case " $missing " in *" postgresql "*)
    mkdir -p /etc/postgresql-common/createcluster.d
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/durable-job-tests.conf ;;
esac
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null; }; then
    echo "make test could not install Debian's package(s): $missing — install them by hand (apt-get install -y $missing), then run make test again" >&2
    exit 1
fi
