// A WebSocket client as URLSession code writes it (Apple's "URLSessionWebSocketTask" pattern).
import Foundation

final class ChatClient: NSObject, URLSessionWebSocketDelegate {
    private var task: URLSessionWebSocketTask?
    var onMessage: ((String) -> Void)?

    func connect(to url: URL) {
        let session = URLSession(configuration: .default, delegate: self, delegateQueue: OperationQueue())
        task = session.webSocketTask(with: url, protocols: ["chat.v2"])
        task?.maximumMessageSize = 4 * 1024 * 1024
        task?.resume()
        listen()
    }

    private func listen() {
        task?.receive { [weak self] result in
            switch result {
            case .success(.string(let text)): self?.onMessage?(text)
            case .success(.data(let data)): self?.onMessage?(String(decoding: data, as: UTF8.self))
            case .success: break
            case .failure(let error): print("receive failed: \(error)"); return
            }
            self?.listen()
        }
    }

    func say(_ text: String) {
        task?.send(.string(text)) { error in
            if let error { print("send failed: \(error)") }
        }
    }

    func say(_ data: Data) async throws {
        try await task?.send(.data(data))
    }

    func next() async throws -> URLSessionWebSocketTask.Message? {
        try await task?.receive()
    }

    func keepAlive() {
        task?.sendPing { error in
            if let error { print("no pong: \(error)") }
        }
    }

    func leave() {
        task?.cancel(with: .goingAway, reason: "bye".data(using: .utf8))
    }

    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask, didOpenWithProtocol protocol: String?) {
        print("open with \(`protocol` ?? "no subprotocol")")
    }

    func urlSession(_ session: URLSession, webSocketTask: URLSessionWebSocketTask,
                    didCloseWith closeCode: URLSessionWebSocketTask.CloseCode, reason: Data?) {
        print("closed \(closeCode.rawValue) \(webSocketTask.closeCode == closeCode)")
    }
}
