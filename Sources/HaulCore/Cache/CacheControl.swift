import Foundation

/// The directives of `Cache-Control` header fields (RFC 9111 §5.2), request or response.
public struct CacheControl: Sendable, Hashable {
    /// Directive names (lowercased) to their argument, `nil` for directives without one.
    public private(set) var directives: [String: String?] = [:]

    /// Parses every `Cache-Control` value in `headers`, and `Pragma: no-cache` as `no-cache`.
    public init(_ headers: HTTPHeaderFields) {
        for value in headers.values(for: "Cache-Control") {
            for part in value.split(separator: ",") {
                let item = part.trimmingCharacters(in: .whitespaces)
                guard !item.isEmpty else { continue }
                if let equals = item.firstIndex(of: "=") {
                    let name = item[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
                    var argument = item[item.index(after: equals)...].trimmingCharacters(in: .whitespaces)
                    if argument.hasPrefix("\""), argument.hasSuffix("\""), argument.count >= 2 {
                        argument = String(argument.dropFirst().dropLast())
                    }
                    self.directives[name] = argument
                } else {
                    self.directives[item.lowercased()] = .some(nil)
                }
            }
        }
        if headers.values(for: "Cache-Control").isEmpty,
            headers.values(for: "Pragma").contains(where: { $0.lowercased().contains("no-cache") })
        {
            self.directives["no-cache"] = .some(nil)
        }
    }

    public func has(_ name: String) -> Bool { self.directives[name] != nil }

    /// A delta-seconds argument (`max-age=60`); `nil` when absent or malformed.
    public func seconds(_ name: String) -> Int? {
        guard let argument = self.directives[name], let text = argument, let value = Int(text), value >= 0 else { return nil }
        return value
    }

    public var noStore: Bool { self.has("no-store") }
    public var noCache: Bool { self.has("no-cache") }
    public var mustRevalidate: Bool { self.has("must-revalidate") }
    public var maxAge: Int? { self.seconds("max-age") }
}
