// The overview refreshes itself every 5 seconds; everything is in the HTML
// without this script.
setTimeout(function () { location.reload(); }, 5000);
