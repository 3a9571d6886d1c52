import Foundation

/// One challenge of a `WWW-Authenticate` header (RFC 9110 §11.6.1): a scheme and its
/// parameters (`realm`, `nonce`, …; names lowercased).
public struct AuthenticationChallenge: Sendable, Hashable {
    public var scheme: String
    public var parameters: [String: String]

    public init(scheme: String, parameters: [String: String]) {
        self.scheme = scheme
        self.parameters = parameters
    }

    public var realm: String? { self.parameters["realm"] }

    /// Parses every challenge in the header values (several may share one value, separated by
    /// commas: `Digest realm="a", nonce="b", Basic realm="c"`).
    public static func parse(_ values: [String]) -> [AuthenticationChallenge] {
        var challenges: [AuthenticationChallenge] = []
        for value in values {
            var scanner = ChallengeScanner(Array(value.unicodeScalars))
            while let challenge = scanner.nextChallenge() { challenges.append(challenge) }
        }
        return challenges
    }
}

private struct ChallengeScanner {
    let scalars: [Unicode.Scalar]
    var index = 0

    init(_ scalars: [Unicode.Scalar]) {
        self.scalars = scalars
    }

    mutating func skip(_ set: String) {
        while self.index < self.scalars.count, set.unicodeScalars.contains(self.scalars[self.index]) { self.index += 1 }
    }

    mutating func token() -> String {
        let start = self.index
        while self.index < self.scalars.count, !" \t,=\"".unicodeScalars.contains(self.scalars[self.index]) { self.index += 1 }
        return String(String.UnicodeScalarView(self.scalars[start..<self.index]))
    }

    mutating func quoted() -> String {
        self.index += 1  // opening quote
        var result = String.UnicodeScalarView()
        while self.index < self.scalars.count, self.scalars[self.index] != "\"" {
            if self.scalars[self.index] == "\\", self.index + 1 < self.scalars.count { self.index += 1 }
            result.append(self.scalars[self.index])
            self.index += 1
        }
        if self.index < self.scalars.count { self.index += 1 }  // the closing quote, when there is one
        return String(result)
    }

    mutating func nextChallenge() -> AuthenticationChallenge? {
        self.skip(" \t,")
        let scheme = self.token()
        guard !scheme.isEmpty else { return nil }
        var parameters: [String: String] = [:]
        while true {
            self.skip(" \t")
            let mark = self.index
            let name = self.token()
            self.skip(" \t")
            guard !name.isEmpty, self.index < self.scalars.count, self.scalars[self.index] == "=" else {
                self.index = mark  // the next challenge's scheme
                break
            }
            self.index += 1
            self.skip(" \t")
            let value = self.index < self.scalars.count && self.scalars[self.index] == "\"" ? self.quoted() : self.token()
            parameters[name.lowercased()] = value
            self.skip(" \t")
            if self.index < self.scalars.count, self.scalars[self.index] == "," { self.index += 1 } else { break }
        }
        return AuthenticationChallenge(scheme: scheme, parameters: parameters)
    }
}

/// `Authorization` header values for Basic (RFC 7617) and Digest (RFC 7616) challenges.
public enum HTTPAuthorization {
    public static func basic(user: String, password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// The Digest answer to `challenge` for `method` and `uri` (path and query).
    ///
    /// - Parameters:
    ///   - hash: hex digest for the challenge's algorithm (`MD5`, `SHA-256`), supplied by the
    ///     caller so this module needs no cryptography library; `nil` for an unknown algorithm.
    ///   - clientNonce: `cnonce`, random per request.
    ///   - count: `nc`, how many requests used this nonce.
    /// - Returns: `nil` when the challenge lacks a realm or nonce, or names an unsupported
    ///   algorithm or quality of protection.
    public static func digest(
        challenge: AuthenticationChallenge,
        user: String,
        password: String,
        method: String,
        uri: String,
        clientNonce: String,
        count: Int,
        hash: (String, String) -> String?
    ) -> String? {
        guard let realm = challenge.realm, let nonce = challenge.parameters["nonce"] else { return nil }
        let algorithm = challenge.parameters["algorithm"] ?? "MD5"
        let base = algorithm.uppercased().hasSuffix("-SESS") ? String(algorithm.dropLast(5)) : algorithm
        guard var ha1 = hash(base, "\(user):\(realm):\(password)") else { return nil }
        if algorithm.uppercased().hasSuffix("-SESS") {
            guard let session = hash(base, "\(ha1):\(nonce):\(clientNonce)") else { return nil }
            ha1 = session
        }
        guard let ha2 = hash(base, "\(method):\(uri)") else { return nil }
        let qops = (challenge.parameters["qop"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        let nc = String(format: "%08x", count)
        var fields = [
            "username=\"\(user)\"", "realm=\"\(realm)\"", "nonce=\"\(nonce)\"", "uri=\"\(uri)\"", "algorithm=\(algorithm)",
        ]
        let response: String?
        if qops.contains("auth") {
            response = hash(base, "\(ha1):\(nonce):\(nc):\(clientNonce):auth:\(ha2)")
            fields += ["qop=auth", "nc=\(nc)", "cnonce=\"\(clientNonce)\""]
        } else if qops.isEmpty {
            response = hash(base, "\(ha1):\(nonce):\(ha2)")
        } else {
            return nil  // auth-int only
        }
        guard let response else { return nil }
        fields.append("response=\"\(response)\"")
        if let opaque = challenge.parameters["opaque"] { fields.append("opaque=\"\(opaque)\"") }
        return "Digest " + fields.joined(separator: ", ")
    }
}
