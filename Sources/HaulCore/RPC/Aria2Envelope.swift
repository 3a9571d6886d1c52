import Foundation

/// An error answer of aria2's JSON-RPC: `{"code":1,"message":"Unauthorized"}`. Code 1 is
/// aria2's for every refusal of a call (unknown gid, bad option, wrong token); the JSON-RPC
/// codes are for requests that are not calls at all.
public struct Aria2Fault: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: Int
    public var message: String

    public init(code: Int = 1, _ message: String) {
        self.code = code
        self.message = message
    }

    public static let parseError = Aria2Fault(code: -32700, "Parse error.")
    public static let invalidRequest = Aria2Fault(code: -32600, "Invalid Request.")
    public static let methodNotFound = Aria2Fault(code: -32601, "Method not found.")
    public static let unauthorized = Aria2Fault(code: 1, "Unauthorized")

    public static func invalidParams(_ detail: String) -> Aria2Fault {
        Aria2Fault(code: -32602, "Invalid params: \(detail)")
    }

    public var description: String { "\(self.code) \(self.message)" }

    /// `{"code":…,"message":…}`.
    public var json: JSONValue { .object([("code", .integer(Int64(self.code))), ("message", .string(self.message))]) }
}

/// One call of aria2's JSON-RPC: a method, its positional parameters and the id to answer with.
public struct Aria2Call: Sendable, Hashable {
    /// The request's `id` (any JSON value; `null` when absent).
    public var id: JSONValue
    public var method: String
    public var params: [JSONValue]

    public init(id: JSONValue, method: String, params: [JSONValue]) {
        self.id = id
        self.method = method
        self.params = params
    }
}

/// What one HTTP body or WebSocket message of JSON-RPC holds, and how answers are written.
///
/// A body is one request object or a batch (an array of them). Each element is either a call
/// or a fault to answer with (a batch answers every element, in order).
public enum Aria2Envelope: Sendable, Hashable {
    case single(Result<Aria2Call, Aria2FaultWithID>)
    case batch([Result<Aria2Call, Aria2FaultWithID>])

    /// The largest body accepted (aria2's `--rpc-max-request-size` default).
    public static let maximumRequestSize = 2 * 1024 * 1024

    /// Reads a body. Never throws: what is not JSON is a parse error to answer.
    public static func parse(_ bytes: some Collection<UInt8>) -> Aria2Envelope {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: bytes)
        } catch {
            return .single(.failure(Aria2FaultWithID(id: .null, fault: .parseError)))
        }
        return Self.parse(value)
    }

    public static func parse(_ value: JSONValue) -> Aria2Envelope {
        if case .array(let elements) = value {
            guard !elements.isEmpty else { return .single(.failure(Aria2FaultWithID(id: .null, fault: .invalidRequest))) }
            return .batch(elements.map(Self.call))
        }
        return .single(Self.call(value))
    }

    /// One request object as a call: `method` a string, `params` an array when present.
    public static func call(_ value: JSONValue) -> Result<Aria2Call, Aria2FaultWithID> {
        guard case .object = value else { return .failure(Aria2FaultWithID(id: .null, fault: .invalidRequest)) }
        let id = value["id"] ?? .null
        guard let method = value["method"]?.stringValue else { return .failure(Aria2FaultWithID(id: id, fault: .invalidRequest)) }
        switch value["params"] {
        case nil, .null?: return .success(Aria2Call(id: id, method: method, params: []))
        case .array(let params)?: return .success(Aria2Call(id: id, method: method, params: params))
        default: return .failure(Aria2FaultWithID(id: id, fault: .invalidParams("params must be an array")))
        }
    }

    /// `{"id":…,"jsonrpc":"2.0","result":…}`.
    public static func result(id: JSONValue, _ result: JSONValue) -> JSONValue {
        .object([("id", id), ("jsonrpc", .string("2.0")), ("result", result)])
    }

    /// `{"id":…,"jsonrpc":"2.0","error":{"code":…,"message":…}}`.
    public static func error(id: JSONValue, _ fault: Aria2Fault) -> JSONValue {
        .object([("id", id), ("jsonrpc", .string("2.0")), ("error", fault.json)])
    }

    /// `{"jsonrpc":"2.0","method":"aria2.onDownloadStart","params":[{"gid":…}]}`.
    public static func notification(_ method: String, gid: String) -> JSONValue {
        .object([("jsonrpc", .string("2.0")), ("method", .string(method)), ("params", .array([.object([("gid", .string(gid))])]))])
    }
}

/// A fault and the id of the request it answers.
public struct Aria2FaultWithID: Error, Sendable, Hashable {
    public var id: JSONValue
    public var fault: Aria2Fault

    public init(id: JSONValue, fault: Aria2Fault) {
        self.id = id
        self.fault = fault
    }
}

/// The `token:SECRET` rule of aria2: every `aria2.*` call carries it as its first parameter
/// when the daemon has a secret; `system.*` calls do not (inside `system.multicall` each
/// sub-call carries its own).
public enum Aria2Token {
    /// The parameters after the token. Throws `Unauthorized` when a secret is set and the first
    /// parameter is not `token:` followed by it. Without a secret a token, if given, is dropped.
    public static func strip(_ params: [JSONValue], secret: String?) throws(Aria2Fault) -> [JSONValue] {
        let given: String? = params.first?.stringValue.flatMap { $0.hasPrefix("token:") ? String($0.dropFirst(6)) : nil }
        if let secret, !secret.isEmpty {
            guard let given, Self.equal(given, secret) else { throw .unauthorized }
        }
        return given == nil ? params : Array(params.dropFirst())
    }

    /// Compares in time independent of where the strings differ.
    static func equal(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8)
        let y = Array(b.utf8)
        var difference = UInt8(x.count == y.count ? 0 : 1)
        for index in 0..<max(x.count, y.count) {
            difference |= (index < x.count ? x[index] : 0) ^ (index < y.count ? y[index] : 0)
        }
        return difference == 0
    }
}
