// Haul re-exports Foundation's URL loading types (URLRequest, HTTPURLResponse, URLError, …),
// which live in FoundationNetworking on Linux, so that `import Haul` is all a program needs.
@_exported import Foundation
#if canImport(FoundationNetworking)
@_exported import FoundationNetworking
#endif
