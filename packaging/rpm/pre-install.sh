getent group xfer >/dev/null || groupadd -r xfer
getent passwd xfer >/dev/null || \
    useradd -r -g xfer -d /var/lib/xfer -s /sbin/nologin -c "xfer transfer service" xfer
exit 0
