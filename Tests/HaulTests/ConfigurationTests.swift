import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Haul
import Testing

@Suite("Configurations: defaults per kind, copies, and the session's snapshot")
struct ConfigurationTests {
    @Test("Each kind has URLSession's defaults: shared stores for .default, private ones for .ephemeral")
    func defaultsPerKind() {
        let standard = TransferSessionConfiguration.default
        let ephemeral = TransferSessionConfiguration.ephemeral
        #expect(standard.urlCache === TransferURLCache.shared && standard.httpCookieStorage === TransferCookieStorage.shared)
        #expect(standard.urlCredentialStorage === TransferCredentialStorage.shared)
        #expect(ephemeral.urlCache !== TransferURLCache.shared && ephemeral.urlCache?.directory == nil)
        #expect(ephemeral.httpCookieStorage !== TransferCookieStorage.shared)
        #expect(TransferSessionConfiguration.ephemeral.urlCache !== ephemeral.urlCache, "every access makes a new private cache")
        #expect(standard.requestCachePolicy == .useProtocolCachePolicy)
        #expect(standard.tlsMinimumSupportedProtocolVersion == .TLSv12 && standard.tlsMaximumSupportedProtocolVersion == .TLSv13)
        #expect(standard.timeoutIntervalForRequest == 60 && standard.timeoutIntervalForResource == 7 * 24 * 3600)
        #expect(standard.httpMaximumConnectionsPerHost == 6 && standard.httpShouldSetCookies)
        #expect(TransferSessionConfiguration.background(withIdentifier: "x").urlCache == nil)
    }

    @Test("copy() carries every setting; a session keeps its own copy")
    func copies() throws {
        let configuration = TransferSessionConfiguration.ephemeral
        let cache = TransferURLCache(memoryCapacity: 1, diskCapacity: 0)
        configuration.timeoutIntervalForRequest = 5
        configuration.timeoutIntervalForResource = 50
        configuration.httpAdditionalHeaders = ["X-A": "1"]
        configuration.httpMaximumConnectionsPerHost = 2
        configuration.maximumRedirects = 3
        configuration.urlCache = cache
        configuration.requestCachePolicy = .returnCacheDataDontLoad
        configuration.tlsMinimumSupportedProtocolVersion = .TLSv13
        configuration.tlsMaximumSupportedProtocolVersion = .TLSv13
        configuration.httpShouldSetCookies = false
        configuration.usesEnvironmentProxies = true
        configuration.networkServiceType = .background
        configuration.sharedContainerIdentifier = "group"
        configuration.httpShouldUsePipelining = true
        configuration.allowsExpensiveNetworkAccess = false
        let copy = configuration.copy()
        #expect(copy.timeoutIntervalForRequest == 5 && copy.timeoutIntervalForResource == 50)
        #expect(copy.httpAdditionalHeaders == ["X-A": "1"] && copy.httpMaximumConnectionsPerHost == 2 && copy.maximumRedirects == 3)
        #expect(copy.urlCache === cache && copy.requestCachePolicy == .returnCacheDataDontLoad)
        #expect(copy.tlsMinimumSupportedProtocolVersion == .TLSv13 && copy.tlsMaximumSupportedProtocolVersion == .TLSv13)
        #expect(!copy.httpShouldSetCookies && copy.usesEnvironmentProxies)
        #expect(copy.networkServiceType == .background && copy.sharedContainerIdentifier == "group")
        #expect(copy.httpShouldUsePipelining && !copy.allowsExpensiveNetworkAccess)

        let session = TransferSession(configuration: configuration)
        configuration.timeoutIntervalForRequest = 99
        #expect(session.configuration.timeoutIntervalForRequest == 5, "changing the configuration later does not reach the session")
        session.finishTasksAndInvalidate()
    }
}
