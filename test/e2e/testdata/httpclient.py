"""A keep-alive HTTP client for the socket tests: httpclient.py PORT SECONDS.

One connection (http.client never reconnects here: a closed connection is a
failure): GET /1, /2, ... every 10 ms; each answer must be "N N" (the
server's hit count matches, so no request was lost or repeated). Prints
"ok N PORT".
"""
import http.client, sys, time

c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.connect()
port = c.sock.getsockname()[1]
sock = c.sock
end = time.time() + float(sys.argv[2])
n = 0
try:
    while time.time() < end:
        n += 1
        c.request("GET", "/%d" % n)
        r = c.getresponse()
        body = r.read()
        if body != b"%d %d\n" % (n, n) or c.sock is not sock:
            print("FAIL request %d: %r" % (n, body), flush=True)
            sys.exit(1)
        time.sleep(0.01)
except Exception as e:
    print("FAIL after %d: %r" % (n, e), flush=True)
    sys.exit(1)
print("ok %d %d" % (n, port), flush=True)
