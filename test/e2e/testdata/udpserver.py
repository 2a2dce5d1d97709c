"""A UDP echo server for the socket tests: udpserver.py LOG PORT PEERPORT.

It answers every datagram on 127.0.0.1:PORT with "echo " + the datagram,
and also sends "beat N" every 20 ms from a second socket connected to
127.0.0.1:PEERPORT (a connected UDP socket). Both sockets must keep their
addresses across a restore.
"""
import os, select, socket, sys, time

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # the kernel keeps 131072
s.bind(("127.0.0.1", int(sys.argv[2])))
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.connect(("127.0.0.1", int(sys.argv[3])))
os.write(log, b"start pid=%d\n" % os.getpid())
n = 0
while True:
    r, _, _ = select.select([s], [], [], 0.02)
    if r:
        data, addr = s.recvfrom(65536)
        s.sendto(b"echo " + data, addr)
    n += 1
    try:
        c.send(b"beat %d" % n)
    except ConnectionRefusedError:
        pass
