/*
 * The least a download client can do: the bench's reference for what the kernel and the
 * server cost on this machine, without any program's own work (scripts/bench, small files).
 *
 * Usage: bench-bare-client LIST CONNECTIONS
 *
 * LIST holds one http://127.0.0.1:PORT/PATH URL a line. CONNECTIONS processes each open one
 * keep-alive connection to the first URL's port and fetch every CONNECTIONS-th URL in turn
 * (a process per connection: no locks, no event loop). Each response is read as nginx sends
 * it (a status line, headers with Content-Length, the body) and written with write(2) into a
 * file named after the URL's last path component in the current directory: one recv into a
 * 512 KiB buffer, one write of what it got, as `haul get` and curl do. No verification, no
 * progress, no resume, no error recovery: a response that is not 200 with a length fails it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static char buffer[1 << 19];

static int fetch(int port, char **paths, int first, int count, int step) {
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (sock < 0 || connect(sock, (struct sockaddr *)&address, sizeof address) != 0) { perror("connect"); return 1; }
    for (int i = first; i < count; i += step) {
        char request[1024];
        int length = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", paths[i], port);
        if (write(sock, request, length) != length) { perror("write request"); return 1; }
        /* The head: peeked until its end is in, then taken alone (the body stays queued). */
        char head[8192];
        int headLength = 0;
        for (;;) {
            ssize_t got = recv(sock, head, sizeof head - 1, MSG_PEEK);
            if (got <= 0) { fprintf(stderr, "bare client: connection closed in a head\n"); return 1; }
            char *end = memmem(head, got, "\r\n\r\n", 4);
            if (end) { headLength = (int)(end - head) + 4; break; }
            if (got == sizeof head - 1) { fprintf(stderr, "bare client: head too long\n"); return 1; }
        }
        if (recv(sock, head, headLength, 0) != headLength) { perror("recv head"); return 1; }
        head[headLength] = 0;
        char *field = strcasestr(head, "\r\ncontent-length:");
        if (strncmp(head, "HTTP/1.1 200", 12) != 0 || field == NULL) { fprintf(stderr, "bare client: %s: not a 200 with a length\n", paths[i]); return 1; }
        long remaining = atol(field + 17);
        const char *name = strrchr(paths[i], '/') + 1;
        int file = open(name, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (file < 0) { perror(name); return 1; }
        while (remaining > 0) {
            ssize_t got = recv(sock, buffer, remaining < (long)sizeof buffer ? remaining : (long)sizeof buffer, 0);
            if (got <= 0) { fprintf(stderr, "bare client: %s: body cut short\n", paths[i]); return 1; }
            if (write(file, buffer, got) != got) { perror("write"); return 1; }
            remaining -= got;
        }
        close(file);
    }
    close(sock);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: bench-bare-client LIST CONNECTIONS\n"); return 2; }
    FILE *list = fopen(argv[1], "r");
    if (!list) { perror(argv[1]); return 2; }
    int connections = atoi(argv[2]), count = 0, capacity = 1024, port = 0;
    char **paths = malloc(capacity * sizeof *paths), line[2048];
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\r\n")] = 0;
        char *host = strstr(line, "://");
        char *path = host ? strchr(host + 3, '/') : NULL;
        char *colon = host ? strchr(host + 3, ':') : NULL;
        if (!path || !colon || colon > path) continue;
        port = atoi(colon + 1);
        if (count == capacity) paths = realloc(paths, (capacity *= 2) * sizeof *paths);
        paths[count++] = strdup(path);
    }
    if (count == 0 || connections < 1) { fprintf(stderr, "bare client: no URLs\n"); return 2; }
    if (connections > count) connections = count;
    for (int c = 0; c < connections; c++)
        if (fork() == 0) _exit(fetch(port, paths, c, count, connections));
    int failed = 0, status;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
}
