[ -e /var/lib/xfer ] || install -d -o xfer -g xfer -m 0750 /var/lib/xfer
# The served tree is created once and never changed or removed by the package.
[ -e /srv/xfer ] || install -d -o xfer -g xfer -m 0750 /srv/xfer
systemctl daemon-reload >/dev/null 2>&1 || true
exit 0
