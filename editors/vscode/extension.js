// Starts `rpn2c lsp` (stdio) for .rpn files; everything else comes from the server.
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const config = vscode.workspace.getConfiguration("rpn2c");
  const server = {
    command: config.get("server.command", "rpn2c"),
    args: config.get("server.args", ["lsp"]),
  };
  client = new LanguageClient("rpn2c", "rpn2c language server", server, {
    documentSelector: [{ scheme: "file", language: "rpn" }, { scheme: "untitled", language: "rpn" }],
    middleware: {
      // a code lens's "explain · generated code": show the server's answer beside the spec
      executeCommand: async (command, args, next) => {
        const result = await next(command, args);
        if (command === "rpn2c.viewOutput" && result && result.markdown) {
          const doc = await vscode.workspace.openTextDocument({ language: "markdown", content: result.markdown });
          await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.Beside, preview: true });
        }
        return result;
      },
    },
  });
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
