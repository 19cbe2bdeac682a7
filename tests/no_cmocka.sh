#!/bin/sh
# Stands in for the C tests when configure did not find cmocka.
echo "[ RUN      ] cmocka_available"
echo "# the C tests need cmocka: install the Debian package libcmocka-dev and re-run ./configure"
echo "[  FAILED  ] cmocka_available"
echo "[  FAILED  ] 1 test(s), listed below:"
exit 1
